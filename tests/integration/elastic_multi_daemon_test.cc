// SPDX-License-Identifier: Apache-2.0
// Elastic jobs spanning daemons on this machine: a rank killed on the leader's
// node or a follower's, a follower daemon killed (the ring re-forms among the
// survivors), a daemon paused past the silence limit (removed, then refused
// as stale when it wakes), and the leader's daemon killed (the job fails
// everywhere, naming it). Recovery times are printed for the closing note.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/elastic_fixture.h"
#include "tests/testutil/process_usage.h"

namespace gradsync::testutil {
namespace {

// Horovod's shrink: survivors see a retriable error, their old-epoch
// enqueues are refused, they rejoin at size 2 (old rank 2 is rank 1) and go
// on. Rank 1 dies on a follower's node (the follower reports it to the
// leader), then on the leader's node (the leader decides at once).
TEST_F(ElasticAcrossDaemonsTest, RankKilledOnAFollowerOrTheLeadersNodeShrinksTheJob) {
  startDaemons(2);
  for (const auto& placement : {std::vector<int>{0, 1, 1}, std::vector<int>{0, 0, 1}}) {
    const std::string job = placement[1] == 1 ? "el-follower-rank" : "el-leader-rank";
    auto env = kElastic;
    env["GRADSYNC_TEST_GO"] = daemons_[0]->dir() + "/" + job;
    auto ranks = launchWith(job, {"elastic_shrink"}, placement, env);
    EXPECT_EQ(ranks[1].wait(kTimeout), 128 + SIGKILL) << job << ranks[1].log();
    EXPECT_EQ(ranks[0].wait(kTimeout), 0) << job << ranks[0].log() << logs();
    EXPECT_EQ(ranks[2].wait(kTimeout), 0) << job << ranks[2].log() << logs();
    // Once the job ended, its history is still there on both daemons.
    for (const auto& daemon : daemons_) {
      ASSERT_TRUE(waitFor([&] { return daemon->log().find("job '" + job + "' ended") != std::string::npos; },
                          std::chrono::seconds(20)))
          << logs();
      Process ctl =
          Process::spawn({runfile("tools/gradsyncctl/gradsyncctl"), "--socket", daemon->socketPath(), "history", job},
                         {}, daemon->dir() + "/history.log");
      EXPECT_EQ(ctl.wait(std::chrono::seconds(20)), 0) << ctl.log();
      const std::string history = ctl.log();
      for (const std::string& part : {"job " + job + "  epoch 2  min size 2  (ended)", std::string("3 -> 2"),
                                      std::string(" ms "), std::string("rank 1 (pid ")}) {
        EXPECT_NE(history.find(part), std::string::npos) << part << " in\n" << history;
      }
    }
  }
}

// Three daemons in a ring 0 -> 1 -> 2; daemon 1 dies in the middle of 4 MiB
// allreduces: the ring re-forms as 0 -> 2 and the survivors go on at size 2.
// With two daemons the follower's loss leaves the leader's two ranks.
TEST_F(ElasticAcrossDaemonsTest, FollowerDaemonKilledTheSurvivorsGoOnAndTheRingReforms) {
  for (const auto& placement : {std::vector<int>{0, 1, 2}, std::vector<int>{0, 0, 1}}) {
    const int count = placement.back() + 1;
    // Three daemons measure their links: again among the two left.
    startDaemons(count, count == 3 ? std::vector<std::string>{"--link-cost", "measured"} : std::vector<std::string>{});
    auto ranks = launchWith("el-" + std::to_string(count), {"elastic_loop", "20", "0"}, placement, kElastic);
    const int victim = 1;
    const int64_t killed_at = killDaemonWhenLooping(ranks, placement, victim);
    const int64_t recovery = survivorsFinish(ranks, placement, victim, killed_at);
    std::printf("recovery (%d daemons, follower SIGKILL -> first collective of epoch 2): %lld ms\n", count,
                static_cast<long long>(recovery));
    EXPECT_LT(recovery, 10000);
    if (count == 3) {
      EXPECT_NE(daemons_[2]->log().find("the ring re-forms for epoch 2 (2 nodes"), std::string::npos) << logs();
      EXPECT_NE(daemons_[2]->log().find("measured the links among 3 daemons"), std::string::npos) << logs();
      EXPECT_NE(daemons_[2]->log().find("measured the links among 2 daemons"), std::string::npos) << logs();
    }
  }
}

// A replacement for a dead rank registers with its node's daemon (a
// follower), which reports it to the leader; the next commit admits it on
// every node: the job grows back to three, the joiner numbered last.
TEST_F(ElasticAcrossDaemonsTest, ReplacementRankJoinsThroughAFollowerAtTheNextCommit) {
  startDaemons(2);
  const std::vector<int> placement = {0, 1, 1};
  const std::vector<std::string> args = {"elastic_loop", "10", "0", "commit", "3"};
  auto ranks = launchWith("el-grow", args, placement, kElastic);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  ranks[1].kill(SIGKILL);
  ASSERT_TRUE(waitFor([&] { return recoveredAt(ranks[0].log(), 2) > 0; }, std::chrono::seconds(15)))
      << ranks[0].log() << logs();
  Process joiner = spawnJoiner(1, "el-grow", 3, args);
  EXPECT_EQ(joiner.wait(kTimeout), 0) << joiner.log() << logs();
  EXPECT_EQ(ranks[0].wait(kTimeout), 0) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[2].wait(kTimeout), 0) << ranks[2].log() << logs();
  EXPECT_NE(joiner.log().find("RECOVERED epoch 3 at"), std::string::npos) << joiner.log();
  EXPECT_NE(joiner.log().find("size 3 rank 2"), std::string::npos) << joiner.log();
  EXPECT_NE(ranks[0].log().find("size 3 rank 0"), std::string::npos) << ranks[0].log();
  EXPECT_NE(daemons_[0]->log().find("admitted 1 new ranks at the commit"), std::string::npos) << logs();
}

// Twenty cycles: a random rank SIGKILLed (wherever it is: in an allreduce,
// a commit, a rejoin), then a replacement on the same daemon, admitted at
// the next commit. Every change is one epoch (41 at the end); every step's
// sum is checked by the ranks; the daemons' descriptors and mappings (the
// ranks' arenas) are back at their baseline once the job ended.
TEST_F(ElasticAcrossDaemonsTest, TwentyRandomKillAndAddCyclesLeaveNothingBehind) {
  startDaemons(2);
  auto warm = launch("el-warm-up", "allreduce", {0, 0, 1, 1});
  std::string report;
  ASSERT_TRUE(allSucceed(warm, kTimeout, &report)) << report << logs();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const Usage leader_before = usageOf(daemons_[0]->process().pid());
  const Usage follower_before = usageOf(daemons_[1]->process().pid());

  constexpr int kCycles = 20;
  const std::vector<int> placement = {0, 0, 1, 1};
  const std::vector<std::string> args = {"elastic_loop", "10", "0", "commit", std::to_string(1 + 2 * kCycles)};
  auto ranks = launchWith("el-churn", args, placement, kElastic);
  std::vector<int> node = placement;  // of each process
  ASSERT_TRUE(allLooping(ranks)) << logs();
  const unsigned seed = static_cast<unsigned>(envInt("GRADSYNC_CHURN_SEED", 20261123));
  std::printf("churn seed %u (GRADSYNC_CHURN_SEED)\n", seed);
  std::mt19937 random(seed);
  const auto rankLogs = [&] {
    std::string all;
    for (auto& rank : ranks) all += "--- rank process " + std::to_string(rank.pid()) + ":\n" + rank.log();
    return all;
  };
  const auto epochReached = [&](int epoch) {
    const std::string change = "epoch " + std::to_string(epoch - 1) + " -> " + std::to_string(epoch) + ":";
    return waitFor([&] { return daemons_[0]->log().find(change) != std::string::npos; }, std::chrono::seconds(20));
  };
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    std::vector<size_t> alive;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].running()) alive.push_back(i);
    }
    ASSERT_EQ(alive.size(), 4u) << logs();
    const size_t victim = alive[random() % alive.size()];
    ranks[victim].kill(SIGKILL);
    // Reaped before the next cycle counts the living: the daemon can see its
    // connections close before the process becomes a zombie to reap.
    ranks[victim].wait(std::chrono::seconds(10));
    ASSERT_TRUE(epochReached(2 + 2 * cycle)) << "cycle " << cycle << ": no epoch after the kill\n"
                                             << rankLogs() << logs();
    ranks.push_back(spawnJoiner(node[victim], "el-churn", 4, args));
    node.push_back(node[victim]);
    ASSERT_TRUE(epochReached(3 + 2 * cycle)) << "cycle " << cycle << ": the replacement was not admitted\n"
                                             << rankLogs() << logs();
    // Admitted on every node (its first step done) before the next kill,
    // which may pick it: killed earlier it would be a joiner that left.
    ASSERT_TRUE(waitFor([&] { return saysLooping(ranks.back()); }, std::chrono::seconds(20)))
        << "cycle " << cycle << ": the replacement never stepped\n"
        << ranks.back().log() << logs();
  }
  for (auto& rank : ranks) {
    if (!rank.running() && rank.wait(std::chrono::milliseconds(0)) == 128 + SIGKILL) continue;
    EXPECT_EQ(rank.wait(kTimeout), 0) << rank.log() << logs();
  }
  EXPECT_EQ(daemons_[0]->log().find("epoch " + std::to_string(1 + 2 * kCycles) + " -> "), std::string::npos);
  // The job ends on both daemons; then nothing of it is left.
  ASSERT_TRUE(waitFor(
      [&] {
        return daemons_[1]->log().find("job 'el-churn' ended") != std::string::npos &&
               daemons_[0]->log().find("job 'el-churn' ended") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << logs();
  constexpr int kAllocatorMappings = 32;
  Usage leader_after, follower_after;
  waitFor(
      [&] {
        leader_after = usageOf(daemons_[0]->process().pid());
        follower_after = usageOf(daemons_[1]->process().pid());
        return leader_after.fds <= leader_before.fds && follower_after.fds <= follower_before.fds &&
               leader_after.memfd_mappings <= leader_before.memfd_mappings &&
               follower_after.memfd_mappings <= follower_before.memfd_mappings &&
               leader_after.mappings <= leader_before.mappings + kAllocatorMappings &&
               follower_after.mappings <= follower_before.mappings + kAllocatorMappings;
      },
      std::chrono::seconds(10));
  std::printf("churn: leader %s -> %s; follower %s -> %s\n", describe(leader_before).c_str(),
              describe(leader_after).c_str(), describe(follower_before).c_str(), describe(follower_after).c_str());
  EXPECT_LE(leader_after.fds, leader_before.fds);
  EXPECT_LE(follower_after.fds, follower_before.fds);
  // Every rank's arena mapping is gone; other mappings may grow a little
  // with the allocator's arenas (ASan's more: 638 -> 653 once in CI).
  EXPECT_LE(leader_after.memfd_mappings, leader_before.memfd_mappings);
  EXPECT_LE(follower_after.memfd_mappings, follower_before.memfd_mappings);
  EXPECT_LE(leader_after.mappings, leader_before.mappings + kAllocatorMappings);
  EXPECT_LE(follower_after.mappings, follower_before.mappings + kAllocatorMappings);
}

// A daemon paused (SIGSTOP) past the silence limit is removed; the others
// go on without it. Resumed, it is told it is stale: its rank fails naming
// that, and it fails none of the others (its abort notice, if it sends one
// before it learns of its removal, is refused).
TEST_F(ElasticAcrossDaemonsTest, PausedDaemonIsRemovedAndRefusedAsStaleWhenItWakes) {
  startDaemons(3);
  const std::vector<int> placement = {0, 1, 2};
  // The survivors keep going for 25 s: the paused node wakes while they run.
  auto ranks = launchWith("el-paused", {"elastic_loop", "20", "25"}, placement, kElastic);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  ASSERT_TRUE(daemons_[1]->process().pause()) << logs();
  const bool recovered = waitFor([&] { return recoveredAt(ranks[0].log(), 2) > 0; }, std::chrono::seconds(15));
  daemons_[1]->process().kill(SIGCONT);
  ASSERT_TRUE(recovered) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[1].wait(std::chrono::seconds(30)), 1) << ranks[1].log() << logs();
  EXPECT_NE(ranks[1].log().find("was removed from job 'el-paused' at epoch 2"), std::string::npos)
      << ranks[1].log() << logs();
  EXPECT_EQ(ranks[0].wait(kTimeout), 0) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[2].wait(kTimeout), 0) << ranks[2].log() << logs();
  // Woken, it either knows it was removed and tells no one, or it sends an
  // abort notice first, which the other follower refuses as stale.
  EXPECT_TRUE(daemons_[1]->log().find("its failure is not announced to the others") != std::string::npos ||
              daemons_[2]->log().find("refused a stale abort notice") != std::string::npos)
      << logs();
}

// A rank stopped (SIGSTOP) for the silence limit is treated as lost: the
// others go on without it instead of waiting for the stall deadline (as
// Horovod does); resumed, its calls fail at once.
TEST_F(ElasticAcrossDaemonsTest, StoppedRankIsTreatedAsLost) {
  startDaemons(2);
  auto ranks = launchWith("el-stopped-rank", {"elastic_loop", "20", "9"}, {0, 1, 1}, kElastic);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  ASSERT_TRUE(ranks[1].pause()) << logs();
  const bool recovered = waitFor([&] { return recoveredAt(ranks[0].log(), 2) > 0; }, std::chrono::seconds(15));
  ranks[1].kill(SIGCONT);
  ASSERT_TRUE(recovered) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[1].wait(std::chrono::seconds(30)), 1) << ranks[1].log();
  // The daemon ended its session when it removed it.
  EXPECT_NE(ranks[1].log().find("session with gradsyncd ended"), std::string::npos) << ranks[1].log();
  EXPECT_EQ(ranks[0].wait(kTimeout), 0) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[2].wait(kTimeout), 0) << ranks[2].log() << logs();
  EXPECT_NE(daemons_[0]->log().find("was stopped (SIGSTOP or a debugger) for 6 s: treated as lost"), std::string::npos)
      << logs();
}

// Without failover, losing the leader's daemon fails the job on every node
// within bounded time, naming the leader.
TEST_F(ElasticAcrossDaemonsTest, LeaderDaemonKilledFailsTheJobNamingTheLeader) {
  startDaemons(2);
  const std::vector<int> placement = {0, 1, 1};
  auto ranks = launchWith("el-leader-lost", {"elastic_loop", "20", "0"}, placement, kElastic);
  const int64_t killed_at = killDaemonWhenLooping(ranks, placement, 0);
  for (int r : {1, 2}) {
    EXPECT_EQ(ranks[r].wait(std::chrono::seconds(30)), 1) << ranks[r].log() << logs();
    EXPECT_NE(ranks[r].log().find("lost the leader"), std::string::npos) << ranks[r].log();
  }
  EXPECT_LT(unixMs() - killed_at, 15000);
}

// With --leader-failover quorum and three daemons, the lowest surviving
// daemon takes over once two of the three voted for it; the survivors go on
// at size 2 from their last step. With two daemons no majority can form:
// the job fails everywhere, saying so.
TEST_F(ElasticAcrossDaemonsTest, LeaderFailoverByQuorumWithThreeDaemonsNotTwo) {
  startDaemons(3, {"--leader-failover", "quorum"});
  std::vector<int> placement = {0, 1, 2};
  auto ranks = launchWith("el-failover", {"elastic_loop", "20", "0"}, placement, kElastic);
  const int64_t killed_at = killDaemonWhenLooping(ranks, placement, 0);
  const int64_t recovery = survivorsFinish(ranks, placement, 0, killed_at);
  std::printf("recovery (3 daemons, leader SIGKILL -> vote -> first collective of epoch 2): %lld ms\n",
              static_cast<long long>(recovery));
  EXPECT_LT(recovery, 10000);
  EXPECT_NE(daemons_[1]->log().find("takes over as leader (a majority voted)"), std::string::npos) << logs();
  EXPECT_NE(daemons_[2]->log().find("follows the new leader"), std::string::npos) << logs();

  startDaemons(2, {"--leader-failover", "quorum"});
  placement = {0, 1, 1};
  ranks = launchWith("el-no-quorum", {"elastic_loop", "20", "0"}, placement, kElastic);
  killDaemonWhenLooping(ranks, placement, 0);
  for (int r : {1, 2}) {
    EXPECT_EQ(ranks[r].wait(std::chrono::seconds(30)), 1) << ranks[r].log() << logs();
    EXPECT_NE(ranks[r].log().find("no failover: a majority needs three or more daemons"), std::string::npos)
        << ranks[r].log();
  }
}

// A ring that breaks at once while the followers elect a new leader: the
// leader's daemon is paused (its followers notice within the keepalive's
// 4 s, then vote) and, at the same moment, daemon 4 is killed, so daemon 3's
// ring with it fails at once. The ring's wait for the cause lasts while an
// election is under way (up to its voting limit, not only the 7 s after the
// ring broke): the three survivors elect a new leader, drop daemon 4 in the
// next epoch, and finish at size 3, none failing the job on the ring.
TEST_F(ElasticAcrossDaemonsTest, ARingBrokenDuringAnElectionWaitsForTheNewLeadersEpoch) {
  startDaemons(5, {"--leader-failover", "quorum"});
  std::map<std::string, std::string> env = kElastic;
  env["GRADSYNC_MIN_SIZE"] = "3";
  const std::vector<int> placement = {0, 1, 2, 3, 4};
  auto ranks = launchWith("el-ring-election", {"elastic_loop", "20", "0"}, placement, env);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  ASSERT_TRUE(daemons_[0]->process().pause()) << logs();
  daemons_[4]->process().kill(SIGKILL);
  ranks[4].kill(SIGKILL);
  ranks[0].kill(SIGKILL);
  for (int r : {1, 2, 3}) {
    EXPECT_EQ(ranks[r].wait(kTimeout), 0) << "rank " << r << ":\n" << ranks[r].log() << logs();
    EXPECT_NE(ranks[r].log().find("size 3"), std::string::npos) << ranks[r].log();
  }
  EXPECT_NE(daemons_[1]->log().find("takes over as leader (a majority voted)"), std::string::npos) << logs();
  daemons_[0]->process().kill(SIGCONT);  // it finds it lost the majority, and stops its side
}

// Memberships sent one node per part (--membership-part-bytes 1): each
// follower reads the rest from the leader (Members) when the job forms, at
// the epoch that drops a killed follower, and from the new leader after a
// failover; the survivors go on as with memberships sent whole.
TEST_F(ElasticAcrossDaemonsTest, MembershipsInPartsOfOneNodeFormEpochsAndElectLeaders) {
  const std::vector<std::string> flags = {"--membership-part-bytes", "1", "--leader-failover", "quorum"};
  const std::vector<int> placement = {0, 1, 2};
  const std::string parts = "from the leader in parts (3 nodes)";
  startDaemons(3, flags);
  auto ranks = launchWith("el-parts-epoch", {"elastic_loop", "20", "0"}, placement, kElastic);
  int64_t killed_at = killDaemonWhenLooping(ranks, placement, 2);
  EXPECT_LT(survivorsFinish(ranks, placement, 2, killed_at), 10000);
  EXPECT_NE(daemons_[1]->log().find("read the membership of epoch 1 " + parts), std::string::npos) << logs();
  EXPECT_NE(daemons_[1]->log().find("read the membership of epoch 2 from the leader in parts (2 nodes)"),
            std::string::npos)
      << logs();

  startDaemons(3, flags);
  ranks = launchWith("el-parts-failover", {"elastic_loop", "20", "0"}, placement, kElastic);
  killed_at = killDaemonWhenLooping(ranks, placement, 0);
  EXPECT_LT(survivorsFinish(ranks, placement, 0, killed_at), 10000);
  EXPECT_NE(daemons_[2]->log().find("read the membership of epoch 2 from the leader in parts (2 nodes)"),
            std::string::npos)
      << logs();
  EXPECT_NE(daemons_[2]->log().find("follows the new leader"), std::string::npos) << logs();
}

// The leader's daemon paused (SIGSTOP) for 15 s looks, to both sides, like
// a partition: the two followers elect a new leader and go on at size 2.
// Woken, the old leader reaches no majority: it makes no epoch of its own
// (the job's minimum size of 1 would let it go on alone) and its rank fails
// saying the leader lost the majority.
TEST_F(ElasticAcrossDaemonsTest, PausedLeaderWakesToFindItLostTheMajority) {
  startDaemons(3, {"--leader-failover", "quorum"});
  std::map<std::string, std::string> env = kElastic;
  env["GRADSYNC_MIN_SIZE"] = "1";
  auto ranks = launchWith("el-paused-leader", {"elastic_loop", "20", "20"}, {0, 1, 2}, env);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  const auto paused_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(daemons_[0]->process().pause()) << logs();
  const bool recovered = waitFor([&] { return recoveredAt(ranks[1].log(), 2) > 0; }, std::chrono::seconds(15));
  std::this_thread::sleep_until(paused_at + std::chrono::seconds(15));
  daemons_[0]->process().kill(SIGCONT);
  ASSERT_TRUE(recovered) << ranks[1].log() << logs();
  EXPECT_EQ(ranks[0].wait(std::chrono::seconds(30)), 1) << ranks[0].log() << logs();
  EXPECT_NE(ranks[0].log().find("lost the majority"), std::string::npos) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[0].log().find("RECOVERED"), std::string::npos) << ranks[0].log();
  for (int r : {1, 2}) {
    EXPECT_EQ(ranks[r].wait(kTimeout), 0) << ranks[r].log() << logs();
    EXPECT_NE(ranks[r].log().find("size 2"), std::string::npos) << ranks[r].log();
  }
}

}  // namespace
}  // namespace gradsync::testutil
