// SPDX-License-Identifier: Apache-2.0
// Jobs spanning several daemons on this machine (separate sockets and peer
// ports on loopback): the same collective checks as one node, and the loss
// of a daemon.
#include <signal.h>
#include <fstream>

#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/multi_daemon_fixture.h"
#include "tests/testutil/network_lab.h"

namespace gradsync::testutil {
namespace {

constexpr auto kTimeout = std::chrono::seconds(90);

TEST_F(MultiDaemonTest, AllreduceEveryDtypeTwoDaemonsOneRankEach) {
  startDaemons(2);
  auto ranks = launch("two-by-one", "allreduce", {0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

// Four daemons, one rank each: every dtype and op on 65,536 elements
// (64 KiB to 512 KiB), some by Rabenseifner's halving and doubling, the
// larger by the ring (by the built-in cost of a message: the daemons
// share a host); each result checked by the ranks.
TEST_F(MultiDaemonTest, MediumAllreducesAmongFourDaemonsHalveAndDouble) {
  startDaemons(4);
  auto ranks = launchWith("four-medium", {"allreduce", "65536"}, {0, 1, 2, 3}, {});
  std::string report;
  ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  std::string log;
  ASSERT_TRUE(leaderEndLine("four-medium", &log)) << log;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(log, m, std::regex("job 'four-medium' ended: .* ([0-9]+) ring, ([0-9]+) halving-doubling")))
      << log;
  EXPECT_GT(std::stoi(m[1]), 0) << log;
  EXPECT_GT(std::stoi(m[2]), 0) << log;
  std::printf("four daemons, 65,536 elements of every dtype: %s by the ring, %s by halving and doubling\n",
              m[1].str().c_str(), m[2].str().c_str());
}

// Topology labels order the ring: daemons 0 and 2 under one rack, 1 and
// 3 under another, so the ring runs 0, 2, 1, 3 (not in rank order), and
// every collective still gives each rank its own results.
TEST_F(MultiDaemonTest, TopologyLabelsOrderTheRingAndEveryCollectiveHoldsUp) {
  startDaemons(4, {}, [](int i) { return std::vector<std::string>{"--topology", i % 2 ? "rack-a" : "rack-b"}; });
  std::string report;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"allreduce", "65536"},
                                               {"allgather"},
                                               {"alltoall"},
                                               {"reducescatter"},
                                               {"broadcast"}}) {
    auto ranks = launchWith("racks-" + args[0], args, {0, 1, 2, 3}, {});
    ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << args[0] << ": " << report << logs();
  }
  EXPECT_NE(daemons_[2]->log().find("job 'racks-allreduce': joined the leader at " + leader_ + " as node 1"),
            std::string::npos)
      << logs();
  EXPECT_NE(daemons_[1]->log().find("job 'racks-allreduce': joined the leader at " + leader_ + " as node 2"),
            std::string::npos)
      << logs();
}

// Sixteen daemons, one rank each: allgather, alltoall, 20 steps of a 256 B
// allreduce (recursive doubling among 16 nodes), then training steps of ten
// tensors of 28 B to 4.8 MB (fused: the ring), the steady state's rounds
// once cached; each result checked by the ranks.
TEST_F(MultiDaemonTest, SixteenDaemonsOneRankEach) {
  constexpr int kDaemons = 16;
  startDaemons(kDaemons);
  std::vector<int> placement(kDaemons);
  for (int i = 0; i < kDaemons; ++i) placement[i] = i;
  const auto started = std::chrono::steady_clock::now();
  std::string report;
  for (const std::string scenario : {"allgather", "alltoall", "repeat_allreduce"}) {
    auto ranks = launch("sixteen-" + scenario, scenario, placement);
    ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << scenario << ": " << report << logs();
  }
  auto ranks = launchWith("sixteen-steps", {"training_steps", "6"}, placement, {});
  ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  std::string log;
  auto ended = leaderEndLine("sixteen-steps", &log);
  ASSERT_TRUE(ended) << log;
  EXPECT_NE(log.find("job 'sixteen-steps': cached collectives run after rounds among the 16 daemons"),
            std::string::npos)
      << log;
  // The small allreduce went by recursive doubling; each round cost the
  // leader log2(16) = 4 messages, not 15.
  std::smatch m;
  const std::string small_log = daemons_[0]->log();
  ASSERT_TRUE(std::regex_search(
      small_log, m,
      std::regex(
          "job 'sixteen-repeat_allreduce' ended: .* ([0-9]+) steady-state rounds, "
          "([0-9]+) messages sent in them, [0-9]+ collectives run after them; allreduces among daemons: ([0-9]+) "
          "direct, ([0-9]+) recursive doubling")))
      << small_log;
  EXPECT_GT(std::stoi(m[1]), 0);
  EXPECT_EQ(std::stoi(m[2]), 4 * std::stoi(m[1]));
  EXPECT_EQ(std::stoi(m[3]), 0);
  EXPECT_GE(std::stoi(m[4]), 20);
  std::printf("16 daemons: allgather, alltoall, a small allreduce, then 6 training steps: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

// --steady-state leader: every step goes through the leader, as ids.
TEST_F(MultiDaemonTest, SteadyStateStepsHitTheResponseCache) {
  startDaemons(2, {"--steady-state", "leader"});
  auto ranks = launch("cache-job", "repeat_allreduce", {0, 1});
  std::string report;
  ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  // The leader logs its counters when the job ends: 19 repeated steps give
  // 19 cached responses and 19 cached forwarded requests.
  std::string log;
  auto ended = leaderEndLine("cache-job", &log);
  ASSERT_TRUE(ended) << log;
  EXPECT_GE(ended->cache_hits, 38) << log;
}

// --steady-state rounds (the default): repeated steps run after rounds
// among the daemons, not through the leader (whose cache then sees almost
// nothing), with the same sums (the scenario checks them), ranks
// interleaved two per daemon.
TEST_F(MultiDaemonTest, SteadyStateRoundsRunRepeatedStepsWithoutTheLeader) {
  startDaemons(2, {"--steady-state", "rounds", "--link-cost", "measured"});  // one host: "auto" would not measure
  auto ranks = launch("rounds-job", "repeat_allreduce", {0, 1, 1, 0});
  std::string report;
  ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  std::string log;
  auto ended = leaderEndLine("rounds-job", &log);
  ASSERT_TRUE(ended) << log;
  EXPECT_NE(log.find("job 'rounds-job': cached collectives run after rounds among the 2 daemons"), std::string::npos)
      << log;
  EXPECT_GE(ended->operations, 20) << log;  // 20 steps
  EXPECT_LT(ended->cache_hits, 10) << log;  // the steps did not pass the leader's cache
  // Both daemons measured their link at the first allreduce (as they were
  // told: they share a host) and agreed on one cost.
  std::smatch m0, m1;
  const std::regex measured("job 'rounds-job': measured the links among 2 daemons: ([^;]*);");
  const std::string log0 = daemons_[0]->log(), log1 = daemons_[1]->log();
  ASSERT_TRUE(std::regex_search(log0, m0, measured)) << log0;
  ASSERT_TRUE(std::regex_search(log1, m1, measured)) << log1;
  EXPECT_EQ(m0[1].str(), m1[1].str());
}

// A sharded loop (allgathers, a reducescatter, a grouped allreduce, a
// broadcast, an alltoall per step; the scenario checks every result): once
// cached, the steps run after the rounds among the daemons, groups whole,
// instead of through the leader's negotiation. Three daemons, one of them
// with two ranks.
TEST_F(MultiDaemonTest, ShardedStepsRunAfterTheRoundsWithoutTheLeader) {
  constexpr int kSteps = 12;
  startDaemons(3, {"--steady-state", "rounds"});
  auto ranks = launchWith("sharded-job", {"sharded_steps", std::to_string(kSteps)}, {0, 1, 2, 0}, {});
  std::string report;
  ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  std::string log;
  auto ended = leaderEndLine("sharded-job", &log);
  ASSERT_TRUE(ended) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex("job 'sharded-job' ended: .* ([0-9]+) steady-state rounds, [0-9]+ messages sent in them, "
                 "([0-9]+) collectives run after them")))
      << log;
  // 9 collectives a step, 6 of them not allreduces: more than the steps'
  // allreduces alone could make, though a step late on a busy machine may
  // still go to the leader.
  EXPECT_GT(std::stoi(m[2]), 3 * kSteps) << log;
  EXPECT_LT(ended->cache_hits, 9 * (kSteps - 1) / 2) << log;
}

// --steady-state leader-rounds: the same rounds through the leader, over
// the coordination streams (no data plane for them): each daemon sends one
// small message per round, whatever its ranks and tensors; the sums are
// the scenario's to check. Three daemons, ranks interleaved.
TEST_F(MultiDaemonTest, LeaderRoundsRunRepeatedStepsThroughTheLeader) {
  startDaemons(3, {"--steady-state", "leader-rounds"});
  auto ranks = launch("star-job", "repeat_allreduce", {0, 1, 2, 1, 0, 2});
  std::string report;
  ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  auto steps = launchWith("star-steps", {"training_steps", "8"}, {0, 1, 2}, {});
  ASSERT_TRUE(allSucceed(steps, kTimeout, &report)) << report << logs();
  std::string log;
  auto ended = leaderEndLine("star-job", &log);
  ASSERT_TRUE(ended) << log;
  EXPECT_NE(log.find("job 'star-job': cached collectives run after rounds through the leader among the 3 daemons"),
            std::string::npos)
      << log;
  EXPECT_GE(ended->operations, 20) << log;
  EXPECT_LT(ended->cache_hits, 10) << log;  // the steps did not pass the leader's negotiation
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m,
                                std::regex("job 'star-job' ended: .* ([0-9]+) steady-state rounds, ([0-9]+) messages "
                                           "sent in them")))
      << log;
  EXPECT_GT(std::stoi(m[1]), 0);
  // The leader sends an outcome to each of the 2 followers per round, and
  // a BEGIN where one of them had not sent its part yet.
  EXPECT_GE(std::stoi(m[2]), 2 * std::stoi(m[1]));
  EXPECT_LE(std::stoi(m[2]), 4 * std::stoi(m[1]));
}

// A batch larger than gRPC's 4 MiB message limit (6,000 responses with long
// names, about 5 MB in full) reaches the follower in parts of at most 1 MiB;
// before, the follower's stream broke on it ("lost the leader").
TEST_F(MultiDaemonTest, ABatchOverFourMiBReachesTheFollowerInParts) {
  startDaemons(2, {"--steady-state", "leader"});
  auto ranks = launch("wide-batch", "wide_batch", {0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

// Large tensors of a fused response take a ring of their own where each
// node holds one rank, in place on the rank's tensor; with two ranks on one
// node every tensor goes through the fusion buffer. Same sums either way.
// Grouped steps never hang: the steady state once ran part of a group in a
// round and left the rest waiting at the leader for the part that ran.
TEST_F(MultiDaemonTest, FusedLargeAndSmallTensorsGroupedAndNot) {
  startDaemons(2);
  for (const std::vector<int>& placement : {std::vector<int>{0, 1}, std::vector<int>{0, 0, 1}}) {
    auto ranks = launch("mixed-" + std::to_string(placement.size()), "fused_large_and_small", placement);
    std::string report;
    EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  }
}

TEST_F(MultiDaemonTest, UnevenPlacementTwoPlusOne) {
  startDaemons(2);
  auto ranks = launch("two-plus-one", "allreduce", {0, 0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

// The abandoning rank is on the follower: its data-less request crosses to
// the leader (never through the response cache) and fails every rank's.
TEST_F(MultiDaemonTest, AnAbandonedCollectiveFailsOnEveryNodeAtOnce) {
  startDaemons(2);
  auto ranks = launch("abandon-job", "abandoned", {0, 0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

// Adasum spans the daemons: the tree pairs ranks of different nodes.
TEST_F(MultiDaemonTest, AdasumAcrossDaemonsMatchesTheReference) {
  startDaemons(2);
  auto ranks = launch("adasum-job", "adasum", {0, 1, 1, 0});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

TEST_F(MultiDaemonTest, EveryOtherCollectiveAcrossDaemons) {
  startDaemons(2);
  for (const char* scenario : {"broadcast", "allgather", "reducescatter", "alltoall", "barrier_grouped_fusion"}) {
    auto even = launch(std::string("even-") + scenario, scenario, {0, 1});
    auto uneven = launch(std::string("uneven-") + scenario, scenario, {0, 1, 0});  // interleaved placement
    std::string report;
    EXPECT_TRUE(allSucceed(even, kTimeout, &report)) << scenario << report << logs();
    EXPECT_TRUE(allSucceed(uneven, kTimeout, &report)) << scenario << report << logs();
  }
}

TEST_F(MultiDaemonTest, ThreeDaemonsJoinMismatchAndProcessSets) {
  startDaemons(3);
  auto join = launch("three-join", "join", {0, 1, 2});
  std::string report;
  EXPECT_TRUE(allSucceed(join, kTimeout, &report)) << report << logs();
  // Alltoall by pairwise exchange among three daemons, ranks interleaved
  // (daemon 1 holds ranks 1 and 3): every pair of daemons trades blocks.
  auto alltoall = launch("three-alltoall", "alltoall", {0, 1, 2, 1});
  EXPECT_TRUE(allSucceed(alltoall, kTimeout, &report)) << report << logs();
  auto mismatch = launch("three-mismatch", "mismatch_allreduce", {2, 0, 1});
  EXPECT_TRUE(allSucceed(mismatch, kTimeout, &report)) << report << logs();
  // Process set {0, 2}: the daemon of rank 1 holds no member of it.
  auto sets = launch("three-sets", "process_sets", {0, 1, 2});
  EXPECT_TRUE(allSucceed(sets, kTimeout, &report)) << report << logs();
  // Set {0, 2} with both ranks on daemon 0: nothing of it crosses daemons.
  auto one_node_set = launch("one-node-set", "process_sets", {0, 1, 0});
  EXPECT_TRUE(allSucceed(one_node_set, kTimeout, &report)) << report << logs();
  // Sets added and removed at run time: the leader numbers them, the
  // followers check their ranks' requests against the leader's sets.
  auto dynamic = launch("three-dynamic-sets", "dynamic_process_sets", {0, 1, 2});
  EXPECT_TRUE(allSucceed(dynamic, kTimeout, &report)) << report << logs();
}

// A process set's collectives run among the daemons holding its ranks only:
// they go on while the daemon of the rank outside the set is stopped (for
// less than the 4 s after which keepalives notice it). Through the leader:
// the steady-state rounds are lock-step among all daemons.
TEST_F(MultiDaemonTest, ProcessSetRunsAmongItsOwnDaemonsOnly) {
  startDaemons(3, {"--steady-state", "leader"});
  const std::string go = daemons_[0]->dir() + "/go";
  auto ranks = launchWith("set-ring", {"set_without_outsider"}, {0, 1, 2}, {{"GRADSYNC_TEST_GO", go}});
  const auto said = [&](int rank, const char* what) { return ranks[rank].log().find(what) != std::string::npos; };
  ASSERT_TRUE(waitFor([&] { return said(0, "SET_READY") && said(2, "SET_READY"); }, std::chrono::seconds(30)))
      << ranks[0].log() << ranks[2].log() << logs();
  ASSERT_TRUE(daemons_[1]->process().pause()) << logs();
  { std::ofstream(go) << "go"; }
  const bool done =
      waitFor([&] { return said(0, "SET_DONE") && said(2, "SET_DONE"); }, scaled(std::chrono::seconds(3)));
  daemons_[1]->process().kill(SIGCONT);
  EXPECT_TRUE(done) << "the set's collectives did not finish with daemon 1 stopped\n"
                    << ranks[0].log() << ranks[2].log() << logs();
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

TEST_F(MultiDaemonTest, KilledDaemonFailsPendingWorkOnSurvivorsWithinTenSeconds) {
  startDaemons(2);
  auto ranks = launch("lost-node", "kill_victim", {0, 1});
  ASSERT_TRUE(waitFor([&] { return ranks[0].log().find("ENQUEUED") != std::string::npos; }, std::chrono::seconds(30)))
      << ranks[0].log() << logs();
  // gradsyncctl members on the leader shows both nodes.
  Process ctl = Process::spawn(
      {runfile("tools/gradsyncctl/gradsyncctl"), "--socket", daemons_[0]->socketPath(), "members", "lost-node"}, {},
      daemons_[0]->dir() + "/members.log");
  EXPECT_EQ(ctl.wait(std::chrono::seconds(20)), 0) << ctl.log();
  const std::string members = ctl.log();
  EXPECT_NE(members.find("epoch 1"), std::string::npos) << members;
  EXPECT_NE(members.find("0 (self)  leader"), std::string::npos) << members;
  EXPECT_NE(members.find("follower"), std::string::npos) << members;
  EXPECT_NE(members.find("RECEIVED"), std::string::npos) << members;
  EXPECT_NE(members.find(daemons_[1]->peerAddress()), std::string::npos) << members;
  // The leader makes the job's ncclUniqueId only when every node has a GPU
  // and NCCL (NCCL's bootstrap thread would wait forever otherwise): none
  // here. (tests/fakegpu checks that the id reaches the followers.)
  EXPECT_EQ(members.find("nccl id "), std::string::npos) << members;

  const auto [code, seconds] = killDaemonAndWait(1, ranks[0]);
  EXPECT_EQ(code, 0) << ranks[0].log() << logs();
  EXPECT_LT(seconds, scaled(10.0));
  EXPECT_NE(ranks[0].log().find("lost node 127.0.0.1:"), std::string::npos) << ranks[0].log();
  EXPECT_NE(ranks[0].log().find("ranks [1]"), std::string::npos) << ranks[0].log();

  // A restarted daemon serves a new job with the survivor.
  daemons_[1] = std::make_unique<DaemonFixture>();
  std::string error;
  ASSERT_TRUE(daemons_[1]->start({"--peer-address", "127.0.0.1:0"}, &error)) << error;
  auto next = launch("after-restart", "allgather", {0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << logs();
}

// A rank killed while its daemon waits for it to grant an allgather's
// output: the wait ends at once (not at the 30 s grant deadline), naming the
// rank, on its own node as on the other; gradsyncctl tensors showed the wait.
TEST_F(MultiDaemonTest, RankKilledBeforeGrantingItsOutputFailsEveryRankAtOnce) {
  startDaemons(2);
  const std::string go = daemons_[1]->dir() + "/go";
  auto ranks = launchWith("grant-lost", {"grant_victim"}, {0, 0, 1, 1}, {{"GRADSYNC_TEST_GO", go}});
  ASSERT_TRUE(waitFor(
      [&] {
        return ranks[3].log().find("VICTIM STOPPING") != std::string::npos && processState(ranks[3].pid()) == 'T';
      },
      std::chrono::seconds(30)))
      << ranks[3].log() << logs();
  { std::ofstream(go) << "go"; }
  std::string tensors;
  ASSERT_TRUE(waitFor(
      [&] {
        // Rank 2 grants at once; rank 3, stopped, never does.
        tensors = daemons_[1]->ctl({"tensors", "grant-lost"}).output;
        return tensors.find("output granted [2]  output requested from [3]") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << tensors << logs();
  EXPECT_NE(tensors.find("1 waiting for output grants"), std::string::npos) << tensors;
  EXPECT_NE(tensors.find("ag.lost"), std::string::npos) << tensors;

  const auto killed_at = std::chrono::steady_clock::now();
  ranks[3].kill(SIGKILL);
  EXPECT_EQ(ranks[2].wait(std::chrono::seconds(20)), 0) << ranks[2].log() << logs();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count(), scaled(10.0));
  EXPECT_NE(ranks[2].log().find("before answering the output request"), std::string::npos) << ranks[2].log();
  for (int rank : {0, 1}) EXPECT_EQ(ranks[rank].wait(std::chrono::seconds(20)), 0) << ranks[rank].log() << logs();
  EXPECT_EQ(ranks[3].wait(std::chrono::seconds(5)), 128 + SIGKILL);
}

// The same with the survivor's step a repeat of a cached allreduce: held
// for the rounds (then the leader's), it fails within 10 s naming the node.
TEST_F(MultiDaemonTest, KilledDaemonFailsAHeldCachedStepOnTheSurvivor) {
  startDaemons(2);
  const auto log = killDaemonUnderAHeldStep("lost-node-cached", {0, 1}, 1);
  ASSERT_TRUE(log);
  EXPECT_NE(log->find("ranks [1]"), std::string::npos) << *log;
  EXPECT_NE(daemons_[0]->log().find("cached collectives run after rounds"), std::string::npos) << logs();
}

// The same with the rounds through the leader: the leader waits for the
// killed follower's part of the round; the follower's stream breaks, the
// round is aborted, and the held step fails within 10 s naming the node.
TEST_F(MultiDaemonTest, KilledDaemonFailsAStepHeldForRoundsThroughTheLeader) {
  startDaemons(2, {"--steady-state", "leader-rounds"});
  const auto log = killDaemonUnderAHeldStep("lost-node-star", {0, 1}, 1);
  ASSERT_TRUE(log);
  EXPECT_NE(log->find("ranks [1]"), std::string::npos) << *log;
  EXPECT_NE(daemons_[0]->log().find("cached collectives run after rounds through the leader"), std::string::npos)
      << logs();
}

// The leader's daemon killed while a follower's step waits for a round
// through it: the follower's stream breaks, its rounds are aborted, and the
// held step fails within 10 s naming the leader's node (as lost, or as the
// leader lost, whichever the follower saw first).
TEST_F(MultiDaemonTest, KilledLeaderFailsAStepHeldForRoundsThroughIt) {
  startDaemons(2, {"--steady-state", "leader-rounds"});
  // Rank 0, the survivor, on the follower's daemon; rank 1 on the leader's.
  const auto log = killDaemonUnderAHeldStep("lost-leader-star", {1, 0}, 0);
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->find("lost the leader at " + leader_) != std::string::npos ||
              log->find("lost node " + leader_) != std::string::npos)
      << *log;
  EXPECT_NE(daemons_[1]->log().find("cached collectives run after rounds through the leader"), std::string::npos)
      << logs();
}

TEST_F(MultiDaemonTest, FollowerThatCannotReachTheLeaderFailsWithTheReason) {
  startDaemons(1, {"--join-timeout-seconds", "2"});
  auto env = daemons_[0]->rankEnv("no-leader", 1, 2);
  env["GRADSYNC_LOCAL_RANK"] = "0";
  env["GRADSYNC_LOCAL_SIZE"] = "1";
  env["GRADSYNC_LEADER"] = "127.0.0.1:1";  // nothing listens there
  Process rank1 =
      daemons_[0]->spawnRank("no-leader", 1, 2, {"join_failure", "cannot join the leader at 127.0.0.1:1"}, env);
  EXPECT_EQ(rank1.wait(std::chrono::seconds(30)), 0) << rank1.log() << logs();
}

TEST_F(MultiDaemonTest, JobThatNeverFormsFailsOnEveryNodeNamingWhoNeverCame) {
  startDaemons(2, {"--join-timeout-seconds", "3"});
  // Ranks 0 and 1 on the leader's daemon, 2 and 3 on the follower's; rank 3
  // never starts: the follower names its missing local rank, and the leader
  // the ranks whose node never joined.
  const auto started = std::chrono::steady_clock::now();
  auto leader_side =
      launchAcross({daemons_[0].get(), daemons_[1].get()}, "unformed",
                   {"aborted_with", "the nodes of ranks [2, 3] never joined the leader"}, {0, 0, 1, 1}, {2, 3});
  auto follower_side = launchAcross({daemons_[0].get(), daemons_[1].get()}, "unformed",
                                    {"aborted_with", "local ranks [1] never registered"}, {0, 0, 1, 1}, {0, 1, 3});
  std::string report;
  EXPECT_TRUE(allSucceed(leader_side, kTimeout, &report)) << report << logs();
  EXPECT_TRUE(allSucceed(follower_side, kTimeout, &report)) << report << logs();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), scaled(10.0));
}

TEST_F(MultiDaemonTest, FollowerFailsAtOnceWhenTheLeaderDiesWhileTheJobForms) {
  startDaemons(2, {"--join-timeout-seconds", "30"});
  // Rank 1 (on the leader's daemon) never comes, so the job cannot form;
  // the follower keeps asking the leader until its daemon dies.
  auto follower_side = launchAcross({daemons_[0].get(), daemons_[1].get()}, "orphaned",
                                    {"aborted_with", "lost the leader at " + leader_}, {0, 0, 1}, {0, 1});
  auto leader_side =
      launchAcross({daemons_[0].get(), daemons_[1].get()}, "orphaned", {"campaign_loop"}, {0, 0, 1}, {1, 2});
  // The follower reached the leader's daemon, which does not hold the job yet.
  ASSERT_TRUE(waitFor([&] { return daemons_[1]->log().find("does not hold the job yet") != std::string::npos; },
                      std::chrono::seconds(20)))
      << logs();
  const auto killed_at = std::chrono::steady_clock::now();
  daemons_[0]->process().kill(SIGKILL);
  std::string report;
  EXPECT_TRUE(allSucceed(follower_side, kTimeout, &report)) << report << logs();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count(), scaled(5.0));
}

TEST_F(MultiDaemonTest, WrongTokenAtTheLeaderIsRefused) {
  startDaemons(2, {"--stall-warning-seconds", "1", "--stall-deadline-seconds", "3"});
  const std::string leader = daemons_[0]->peerAddress();
  auto env0 = daemons_[0]->rankEnv("token-job", 0, 2);
  env0["GRADSYNC_LOCAL_SIZE"] = "1";
  env0["GRADSYNC_LEADER"] = leader;
  auto env1 = daemons_[1]->rankEnv("token-job", 1, 2, "not-the-token");
  env1["GRADSYNC_LOCAL_RANK"] = "0";
  env1["GRADSYNC_LOCAL_SIZE"] = "1";
  env1["GRADSYNC_LEADER"] = leader;
  std::vector<Process> ranks;
  ranks.push_back(daemons_[0]->spawnRank("token-job", 0, 2, {"join_failure", "unused"}, env0));
  ranks.push_back(daemons_[1]->spawnRank("token-job", 1, 2, {"join_failure", "token does not match"}, env1));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

// Makes a CA and a certificate for 127.0.0.1 signed by it, in `dir`
// (ca.pem, node.pem, node.key), with openssl.
bool makeCertificates(const std::string& dir) {
  const std::string q = "'" + dir + "'";
  const std::string script =
      "set -e; cd " + q +
      "; "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=gradsync-test-ca; "
      "openssl req -newkey rsa:2048 -nodes -keyout node.key -out node.csr -subj /CN=gradsync-node; "
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext.cnf; "
      "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem -days 2 -extfile ext.cnf";
  return std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
}

std::vector<std::string> tlsFlags(const std::string& dir, const std::string& ca_dir) {
  return {"--peer-tls-cert", dir + "/node.pem", "--peer-tls-key",
          dir + "/node.key", "--peer-tls-ca",   ca_dir + "/ca.pem"};
}

TEST_F(MultiDaemonTest, MutualTlsBetweenDaemonsAndABadCertificateIsRefused) {
  TempDir good, rogue;
  ASSERT_TRUE(makeCertificates(good.path())) << "openssl failed";
  ASSERT_TRUE(makeCertificates(rogue.path())) << "openssl failed";
  // Daemons 0 and 1 share the good CA; daemon 2 has a certificate of another CA.
  daemons_.resize(3);
  const std::vector<std::string> base = {"--peer-address",          "127.0.0.1:0", "--join-timeout-seconds",   "3",
                                         "--stall-warning-seconds", "1",           "--stall-deadline-seconds", "3"};
  for (int i = 0; i < 3; ++i) {
    daemons_[i] = std::make_unique<DaemonFixture>();
    auto flags = base;
    const auto tls = i < 2 ? tlsFlags(good.path(), good.path()) : tlsFlags(rogue.path(), rogue.path());
    flags.insert(flags.end(), tls.begin(), tls.end());
    std::string error;
    ASSERT_TRUE(daemons_[i]->start(flags, &error)) << error;
  }
  EXPECT_NE(daemons_[0]->log().find("(mutual TLS)"), std::string::npos) << daemons_[0]->log();
  auto ok = launch("tls-job", "allreduce", {0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ok, kTimeout, &report)) << report << logs();

  // Rank 1 on the daemon with the rogue certificate: its daemon cannot join,
  // and the error says the TLS handshake failed (an unreachable leader's
  // says the connection was refused).
  std::vector<Process> bad;
  const std::string leader = daemons_[0]->peerAddress();
  auto env0 = daemons_[0]->rankEnv("tls-bad", 0, 2);
  env0["GRADSYNC_LOCAL_SIZE"] = "1";
  env0["GRADSYNC_LEADER"] = leader;
  auto env1 = daemons_[2]->rankEnv("tls-bad", 1, 2);
  env1["GRADSYNC_LOCAL_RANK"] = "0";
  env1["GRADSYNC_LOCAL_SIZE"] = "1";
  env1["GRADSYNC_LEADER"] = leader;
  bad.push_back(daemons_[0]->spawnRank("tls-bad", 0, 2, {"join_failure", "unused"}, env0));
  bad.push_back(daemons_[2]->spawnRank("tls-bad", 1, 2, {"join_failure", "handshake"}, env1));
  EXPECT_TRUE(allSucceed(bad, kTimeout, &report)) << report << logs();
}

// Two "hosts" of a NetworkLab (network namespaces on one bridge), each with
// its own daemon; ranks reach their daemon through its Unix socket (file
// system, not network). Fails where namespaces cannot be made (root and
// iproute2 are needed).
class NetnsTest : public MultiDaemonTest {
 protected:
  void SetUp() override { ASSERT_TRUE(lab_.available()) << lab_.unavailableReason(); }
  void TearDown() override { daemons_.clear(); }  // stop the daemons before their namespaces go

  NetworkLab lab_{2};
};

TEST_F(NetnsTest, AllreduceBetweenTwoNamespaces) {
  daemons_.resize(2);
  for (int i = 0; i < 2; ++i) {
    daemons_[i] = std::make_unique<DaemonFixture>();
    std::string error;
    ASSERT_TRUE(daemons_[i]->startWrapped(lab_.wrapper(i), {{"UCX_TLS", "tcp"}},
                                          {"--peer-address", lab_.address(i) + ":0", "--join-timeout-seconds", "10",
                                           "--data-plane-devices", lab_.device(i)},
                                          &error))
        << error;
  }
  const std::string leader = daemons_[0]->peerAddress();
  ASSERT_EQ(leader.rfind(lab_.address(0) + ":", 0), 0u) << daemons_[0]->log();
  auto ranks = launch("netns-job", "allreduce", {0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
}

}  // namespace
}  // namespace gradsync::testutil
