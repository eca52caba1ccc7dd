// SPDX-License-Identifier: Apache-2.0
// One real gradsyncd and 2-4 real client processes per test: every
// collective, every dtype, process sets, join, disagreements, two jobs.
#include <csignal>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr auto kJobTimeout = std::chrono::seconds(90);

class CollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(daemon_.start({"--log-level", "info"}, &error)) << error;
  }
  void TearDown() override { EXPECT_EQ(daemon_.stop(), 0) << "gradsyncd did not exit cleanly:\n" << daemon_.log(); }

  // Runs `scenario` as a job of `size` ranks; true when every rank passed.
  void runJob(const std::string& job, const std::string& scenario, int size) {
    std::vector<Process> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(daemon_.spawnRank(job, r, size, {scenario}));
    std::string report;
    EXPECT_TRUE(allSucceed(ranks, kJobTimeout, &report)) << scenario << " with " << size << " ranks:\n"
                                                         << report << "daemon log:\n"
                                                         << daemon_.log();
  }

  DaemonFixture daemon_;
};

class EveryCollective : public CollectivesTest, public ::testing::WithParamInterface<std::tuple<std::string, int>> {};

TEST_P(EveryCollective, MatchesReference) {
  const auto& [scenario, size] = GetParam();
  runJob("job-" + scenario, scenario, size);
}

INSTANTIATE_TEST_SUITE_P(Collectives, EveryCollective,
                         ::testing::Combine(::testing::Values("allreduce", "allgather", "broadcast", "alltoall",
                                                              "reducescatter", "barrier_grouped_fusion"),
                                            ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

TEST_F(CollectivesTest, FourRanksAllreduceAndAlltoall) {
  runJob("four-ar", "allreduce", 4);
  runJob("four-a2a", "alltoall", 4);
}

TEST_F(CollectivesTest, StaticProcessSets) { runJob("sets", "process_sets", 3); }
TEST_F(CollectivesTest, DynamicProcessSets) { runJob("dynsets", "dynamic_process_sets", 3); }

TEST_F(CollectivesTest, AWaiterIsWokenWhenAnotherThreadDrainsItsCompletion) {
  runJob("poller", "waiter_beside_poller", 2);
}

// Rank 0 registers and leaves (a rank that failed at its first call) before
// rank 1 registers: rank 1 is refused at once, naming rank 0, instead of
// forming the job anew and waiting for rank 0 until the stall deadline.
TEST_F(CollectivesTest, ARankThatLeftBeforeTheJobFormedFailsTheLaterRanksAtOnce) {
  Process first = daemon_.spawnRank("early", 0, 2, {"leave_at_once"});
  ASSERT_EQ(first.wait(std::chrono::seconds(30)), 0) << first.log();
  const auto start = std::chrono::steady_clock::now();
  Process second = daemon_.spawnRank("early", 1, 2, {"allreduce"});
  EXPECT_EQ(second.wait(std::chrono::seconds(30)), 3) << second.log();  // connect failed
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THAT(second.log(), ::testing::HasSubstr("job 'early' has ended: rank 0"));
  EXPECT_THAT(second.log(), ::testing::HasSubstr("left before every rank of the job had registered"));
}

TEST_F(CollectivesTest, JoinWithUnevenData) { runJob("join", "join", 3); }

TEST_F(CollectivesTest, ElasticJobGoesOnWithTheSurvivorsOfAKilledRank) {
  const std::map<std::string, std::string> elastic = {
      {"GRADSYNC_ELASTIC", "1"}, {"GRADSYNC_MIN_SIZE", "2"}, {"GRADSYNC_TEST_GO", daemon_.dir() + "/shrink"}};
  std::vector<Process> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(daemon_.spawnRank("elastic", r, 3, {"elastic_shrink"}, elastic));
  EXPECT_EQ(ranks[1].wait(kJobTimeout), 128 + SIGKILL) << ranks[1].log();
  EXPECT_EQ(ranks[0].wait(kJobTimeout), 0) << ranks[0].log() << daemon_.log();
  EXPECT_EQ(ranks[2].wait(kJobTimeout), 0) << ranks[2].log() << daemon_.log();
  EXPECT_THAT(daemon_.log(), ::testing::HasSubstr("epoch 1 -> 2"));
}

TEST_F(CollectivesTest, DisagreementFailsOnEveryRankAndJobGoesOn) { runJob("mismatch", "mismatch", 3); }

TEST_F(CollectivesTest, DuplicateNamesAndBadRequestsFailAlone) { runJob("dup", "duplicate", 2); }

TEST_F(CollectivesTest, AnAbandonedCollectiveFailsEveryRankAtOnce) { runJob("abandon", "abandoned", 3); }

TEST_F(CollectivesTest, AdasumOfFourRanksMatchesTheReference) { runJob("adasum", "adasum", 4); }

TEST_F(CollectivesTest, CudaTensorOnADaemonWithoutGpusFailsClearly) { runJob("nogpu", "cuda_without_gpu", 2); }

TEST_F(CollectivesTest, TwoJobsAtOnceStayApart) {
  // Same tensor names in both jobs; each must see only its own ranks' data.
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon_.spawnRank("job-a", r, 2, {"allgather"}));
  for (int r = 0; r < 3; ++r) ranks.push_back(daemon_.spawnRank("job-b", r, 3, {"allgather"}));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kJobTimeout, &report)) << report << daemon_.log();
}

TEST_F(CollectivesTest, PlainCRanksThroughTheSharedLibrary) {
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(Process::spawn({runfile("tests/integration/c_abi_smoke")}, daemon_.rankEnv("c-abi", r, 2),
                                   daemon_.dir() + "/c" + std::to_string(r) + ".log"));
  }
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kJobTimeout, &report)) << report << daemon_.log();
}

TEST_F(CollectivesTest, WrongTokenIsRefused) {
  std::vector<Process> ranks;
  ranks.push_back(daemon_.spawnRank("tok", 0, 2, {"barrier_grouped_fusion"}));
  ASSERT_TRUE(
      waitFor([&] { return daemon_.log().find("rank 0 registered") != std::string::npos; }, std::chrono::seconds(10)))
      << daemon_.log();
  // Rank 1 registers after rank 0 with another token: refused.
  auto env = daemon_.rankEnv("tok", 1, 2, "wrong-token");
  Process intruder =
      Process::spawn({runfile("tests/integration/worker"), "allreduce"}, env, daemon_.dir() + "/intruder.log");
  EXPECT_EQ(intruder.wait(std::chrono::seconds(30)), 3);
  const std::string log = intruder.log();
  EXPECT_NE(log.find("connect failed (16)"), std::string::npos) << log;  // UNAUTHENTICATED
  EXPECT_NE(log.find("token does not match"), std::string::npos) << log;
  ranks[0].kill(SIGKILL);
}

}  // namespace
}  // namespace gradsync::testutil
