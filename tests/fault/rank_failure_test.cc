// SPDX-License-Identifier: Apache-2.0
// A rank killed mid-collective and a collective some ranks never join: the
// other ranks get an error naming the rank (and pid) in bounded time, and
// the daemon keeps serving other jobs.
#include <signal.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

bool logHas(const Process& p, const std::string& text) { return p.log().find(text) != std::string::npos; }

TEST(RankFailureTest, KilledRankFailsPendingCollectivesWithinFiveSeconds) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({}, &error)) << error;
  Process survivor = daemon.spawnRank("victim-job", 0, 2, {"kill_victim"});
  Process victim = daemon.spawnRank("victim-job", 1, 2, {"kill_victim"});
  ASSERT_TRUE(
      waitFor([&] { return logHas(survivor, "ENQUEUED") && logHas(victim, "VICTIM READY"); }, std::chrono::seconds(20)))
      << survivor.log() << victim.log();
  const pid_t victim_pid = victim.pid();
  const auto killed_at = std::chrono::steady_clock::now();
  victim.kill(SIGKILL);
  EXPECT_EQ(victim.wait(std::chrono::seconds(5)), 128 + SIGKILL);
  EXPECT_EQ(survivor.wait(std::chrono::seconds(10)), 0) << survivor.log() << daemon.log();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_LT(seconds, scaled(5.0));
  const std::string log = survivor.log();
  EXPECT_NE(log.find("rank 1 (pid " + std::to_string(victim_pid)), std::string::npos) << log;
  EXPECT_NE(log.find("the process exited or was killed"), std::string::npos) << log;

  // The daemon goes on serving other jobs.
  std::vector<Process> next;
  for (int r = 0; r < 2; ++r) next.push_back(daemon.spawnRank("next-job", r, 2, {"allgather"}));
  std::string report;
  EXPECT_TRUE(allSucceed(next, std::chrono::seconds(30), &report)) << report;
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

TEST(RankFailureTest, RankThatNeverRegistersFailsTheJobAtTheJoinTimeoutNamingIt) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--join-timeout-seconds", "3"}, &error)) << error;
  const auto started = std::chrono::steady_clock::now();
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) {  // rank 2 of 3 never comes
    ranks.push_back(daemon.spawnRank("half-formed", r, 3, {"aborted_with", "ranks [2] never registered"}));
  }
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(20), &report)) << report << daemon.log();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), scaled(10.0));
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

TEST(RankFailureTest, StalledCollectiveWarnsThenFailsNamingMissingRanks) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--stall-warning-seconds", "1", "--stall-deadline-seconds", "2"}, &error)) << error;
  std::vector<Process> ranks;
  const std::string marker = daemon.dir() + "/rank0-done";
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("stall-job", r, 2, {"stall", marker}));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(30), &report)) << report << daemon.log();
  const std::string log = daemon.log();
  EXPECT_NE(log.find("stall: job 'stall-job': collective 'lonely' has waited 1 s for ranks [1]"), std::string::npos)
      << log;
  EXPECT_NE(log.find("deadline passed"), std::string::npos) << log;
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(RankFailureTest, OperationsInFlightPastTheLimitFailAtOnce) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--max-inflight-per-rank", "4"}, &error)) << error;
  std::vector<Process> ranks;
  const std::map<std::string, std::string> env = {{"GRADSYNC_TEST_GO", daemon.dir() + "/fifth-refused"}};
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("inflight-job", r, 2, {"inflight_limit"}, env));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(30), &report)) << report << daemon.log();
  EXPECT_EQ(daemon.stop(), 0);
}

// The daemon's arena budget (--max-total-arena-bytes) holds 1.5 arenas of
// 4 MiB: while one job's rank holds its arena, another job's rank is
// refused at hand-off with an error naming the limit; once the first job
// ended the budget is whole again.
TEST(RankFailureTest, ArenasPastTheDaemonBudgetAreRefusedAndTheBudgetReturns) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--max-total-arena-bytes", "6291456"}, &error)) << error;
  const std::map<std::string, std::string> small_arena = {{"GRADSYNC_ARENA_BYTES", "4194304"}};
  const std::string stop_file = daemon.dir() + "/holder.stop";
  Process holder = daemon.spawnRank("holder", 0, 1, {"campaign_loop", stop_file}, small_arena);
  ASSERT_TRUE(waitFor([&] { return holder.log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(20)))
      << holder.log() << daemon.log();
  Process refused = daemon.spawnRank("refused", 0, 1, {"allreduce"}, small_arena);
  EXPECT_EQ(refused.wait(std::chrono::seconds(20)), 3) << refused.log();
  EXPECT_NE(refused.log().find("max_total_arena_bytes"), std::string::npos) << refused.log();
  EXPECT_NE(refused.log().find("4194304 of the daemon's limit of 6291456"), std::string::npos) << refused.log();
  std::fclose(std::fopen(stop_file.c_str(), "w"));
  EXPECT_EQ(holder.wait(std::chrono::seconds(20)), 0) << holder.log();
  std::vector<Process> next;
  next.push_back(daemon.spawnRank("next", 0, 1, {"allreduce"}, small_arena));
  std::string report;
  EXPECT_TRUE(allSucceed(next, std::chrono::seconds(30), &report)) << report << daemon.log();
  EXPECT_EQ(daemon.stop(), 0);
}

// Jobs larger than --max-job-size are refused at registration.
TEST(RankFailureTest, JobsLargerThanTheLimitAreRefused) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--max-job-size", "2"}, &error)) << error;
  Process rank = daemon.spawnRank("too-big", 0, 3, {"allreduce"});
  EXPECT_EQ(rank.wait(std::chrono::seconds(20)), 3) << rank.log();
  EXPECT_NE(rank.log().find("a job of 3 ranks: this daemon serves jobs of at most 2 (max_job_size)"), std::string::npos)
      << rank.log();
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(RankFailureTest, DaemonShutdownFailsPendingWorkAndExitsCleanly) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({}, &error)) << error;
  Process survivor = daemon.spawnRank("shutdown-job", 0, 2, {"kill_victim"});
  Process victim = daemon.spawnRank("shutdown-job", 1, 2, {"kill_victim"});
  ASSERT_TRUE(waitFor([&] { return logHas(survivor, "ENQUEUED"); }, std::chrono::seconds(20))) << survivor.log();
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
  // The waiting rank learns at once that the daemon is gone (its check for
  // ABORTED fails, so it exits 1, but it does exit, with the cause printed).
  EXPECT_EQ(survivor.wait(std::chrono::seconds(10)), 1) << survivor.log();
  EXPECT_NE(survivor.log().find("daemon shutting down"), std::string::npos) << survivor.log();
}

}  // namespace
}  // namespace gradsync::testutil
