// SPDX-License-Identifier: Apache-2.0
// Elastic jobs spanning daemons, membership growing back: below the job's
// minimum the survivors wait for joiners (and the job fails, naming why,
// once the elastic timeout passed); a daemon that holds no rank of the job
// takes in a new rank and joins the running job as a new node, and a node
// removed with its last rank comes back the same way; a node whose last
// rank dies while a replacement waits there keeps its place.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/elastic_fixture.h"

namespace gradsync::testutil {
namespace {

std::map<std::string, std::string> withMinimum(int min_size, const std::string& timeout_seconds = "") {
  auto env = kElastic;
  env["GRADSYNC_MIN_SIZE"] = std::to_string(min_size);
  if (!timeout_seconds.empty()) env["GRADSYNC_ELASTIC_TIMEOUT"] = timeout_seconds;
  return env;
}

// Horovod #3494: below --min-np the job waits for new ranks instead of
// failing or hanging. Rank 1 dies; the two survivors are below the minimum
// of 3 and are told nothing; a joiner on the follower is admitted at once
// (no commit needed: nobody is training) and the job goes on at size 3.
TEST_F(ElasticAcrossDaemonsTest, BelowTheMinimumTheSurvivorsWaitForAJoinerAndGoOn) {
  startDaemons(2);
  const std::vector<std::string> args = {"elastic_loop", "10", "0", "plain", "3"};
  const auto env = withMinimum(3);
  auto ranks = launchWith("el-below", args, {0, 1, 1}, env);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  ranks[1].kill(SIGKILL);
  ASSERT_TRUE(waitFor(
      [&] { return daemons_[1]->log().find("waiting for new ranks up to the elastic timeout") != std::string::npos; },
      std::chrono::seconds(15)))
      << logs();
  Process joiner = spawnJoiner(1, "el-below", 3, args, env);
  EXPECT_EQ(joiner.wait(kTimeout), 0) << joiner.log() << logs();
  EXPECT_EQ(ranks[0].wait(kTimeout), 0) << ranks[0].log() << logs();
  EXPECT_EQ(ranks[2].wait(kTimeout), 0) << ranks[2].log() << logs();
  // Their whole logs: epoch 2 was below the minimum, nobody trained in it.
  for (int r : {0, 2}) {
    EXPECT_EQ(recoveredAt(ranks[r].log(), 2), -1) << "rank " << r << " trained in epoch 2\n" << ranks[r].log();
  }
  EXPECT_NE(ranks[0].log().find("RECOVERED epoch 3"), std::string::npos) << ranks[0].log();
  EXPECT_NE(ranks[2].log().find("size 3 rank 1"), std::string::npos) << ranks[2].log();
  EXPECT_NE(joiner.log().find("size 3 rank 2"), std::string::npos) << joiner.log();
  EXPECT_NE(daemons_[0]->log().find("admitted 1 new ranks while the job was below its minimum of 3"), std::string::npos)
      << logs();
}

// No joiner comes: after the elastic timeout the leader fails the job on
// every node; the survivors' rejoin ends with the cause (not their own
// timeout, 30 s in the worker).
TEST_F(ElasticAcrossDaemonsTest, BelowTheMinimumPastTheElasticTimeoutTheJobFailsNamingIt) {
  startDaemons(2);
  auto ranks = launchWith("el-below-timeout", {"elastic_loop", "10", "0"}, {0, 1, 1}, withMinimum(3, "2"));
  ASSERT_TRUE(allLooping(ranks)) << logs();
  const int64_t killed_at = unixMs();
  ranks[1].kill(SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_EQ(ranks[r].wait(std::chrono::seconds(20)), 1) << ranks[r].log() << logs();
    EXPECT_NE(ranks[r].log().find("the elastic job stayed below its minimum of 3 ranks for 2 s"), std::string::npos)
        << ranks[r].log();
  }
  const int64_t failed_after = unixMs() - killed_at;
  std::printf("below the minimum with a 2 s elastic timeout: both survivors failed %lld ms after the kill\n",
              static_cast<long long>(failed_after));
  EXPECT_LT(failed_after, 10000);
}

// A third daemon, running nothing of the job, takes in a new rank: it joins
// the running job as a candidate node, and the next commit admits its rank
// (the ring grows to three nodes). Then the rank on daemon 1, that node's
// last, dies: the node is removed; a replacement there brings it back as a
// new node at the following commit.
TEST_F(ElasticAcrossDaemonsTest, NewNodeJoinsTheRunningJobAndARemovedNodeComesBack) {
  startDaemons(3);
  const std::vector<std::string> args = {"elastic_loop", "10", "0", "commit", "4"};
  auto ranks = launchWith("el-new-node", args, {0, 1}, kElastic);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  ranks.push_back(spawnJoiner(2, "el-new-node", 2, args));
  ASSERT_TRUE(waitFor([&] { return recoveredAt(ranks[2].log(), 2) > 0; }, std::chrono::seconds(30)))
      << ranks[2].log() << logs();
  EXPECT_NE(ranks[2].log().find("size 3 rank 2"), std::string::npos) << ranks[2].log();
  EXPECT_NE(daemons_[1]->log().find("the ring re-forms for epoch 2 (3 nodes"), std::string::npos) << logs();

  ranks[1].kill(SIGKILL);
  ASSERT_TRUE(waitFor([&] { return recoveredAt(ranks[0].log(), 3) > 0; }, std::chrono::seconds(30)))
      << ranks[0].log() << logs();
  EXPECT_NE(daemons_[0]->log().find("was removed from job 'el-new-node' at epoch 3"), std::string::npos) << logs();
  ranks.push_back(spawnJoiner(1, "el-new-node", 2, args));
  for (size_t r : {0, 2, 3}) EXPECT_EQ(ranks[r].wait(kTimeout), 0) << ranks[r].log() << logs();
  EXPECT_NE(ranks[3].log().find("RECOVERED epoch 4"), std::string::npos) << ranks[3].log();
  EXPECT_NE(ranks[0].log().find("size 3 rank 0"), std::string::npos) << ranks[0].log();
}

// A replacement waits on a follower (reported to the leader; the ranks never
// commit, so nothing admits it) when that follower's last rank dies: the
// loss's epoch admits it and the node stays in the job, instead of the
// replacement being refused and the node removed.
TEST_F(ElasticAcrossDaemonsTest, ReplacementWaitingWhenItsNodesLastRankDiesJoinsInThatEpoch) {
  startDaemons(2);
  const std::vector<std::string> args = {"elastic_loop", "10", "0", "plain", "2"};
  auto ranks = launchWith("el-last-rank", args, {0, 1}, kElastic);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  Process joiner = spawnJoiner(1, "el-last-rank", 2, args);
  ASSERT_TRUE(waitFor(
      [&] {
        return daemons_[0]->log().find("to join at the next commit (1 waiting across nodes)") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << logs();
  ranks[1].kill(SIGKILL);
  EXPECT_EQ(joiner.wait(kTimeout), 0) << joiner.log() << logs();
  EXPECT_EQ(ranks[0].wait(kTimeout), 0) << ranks[0].log() << logs();
  EXPECT_NE(ranks[0].log().find("RECOVERED epoch 2"), std::string::npos) << ranks[0].log();
  EXPECT_NE(joiner.log().find("size 2 rank 1"), std::string::npos) << joiner.log();
  EXPECT_NE(daemons_[0]->log().find("lost its last rank while 1 new ranks waited there"), std::string::npos) << logs();
  EXPECT_EQ(daemons_[0]->log().find("was removed from job"), std::string::npos) << logs();
  EXPECT_EQ(daemons_[1]->log().find("takes no new rank"), std::string::npos) << logs();
}

// A candidate node's daemon is killed while its joiner waits (the ranks
// never commit, so nothing admits it): the leader forgets the candidate and
// its joiner, and the job goes on at epoch 1 as if neither had come.
TEST_F(ElasticAcrossDaemonsTest, CandidateDaemonKilledBeforeItsJoinerIsAdmittedIsForgotten) {
  startDaemons(3);
  const std::vector<std::string> args = {"elastic_loop", "10", "6", "plain", "1"};
  auto ranks = launchWith("el-candidate-lost", args, {0, 1}, kElastic);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  Process joiner = spawnJoiner(2, "el-candidate-lost", 2, args);
  ASSERT_TRUE(waitFor(
      [&] {
        return daemons_[0]->log().find("to join at the next commit (1 waiting across nodes)") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << logs();
  daemons_[2]->process().kill(SIGKILL);
  joiner.kill(SIGKILL);
  ASSERT_TRUE(
      waitFor([&] { return daemons_[0]->log().find("left before its ranks were admitted") != std::string::npos; },
              std::chrono::seconds(15)))
      << logs();
  for (int r : {0, 1}) {
    EXPECT_EQ(ranks[r].wait(kTimeout), 0) << ranks[r].log() << logs();
    EXPECT_EQ(ranks[r].log().find("RECOVERED"), std::string::npos) << ranks[r].log();
  }
  EXPECT_EQ(daemons_[0]->log().find("epoch 1 -> 2"), std::string::npos) << logs();
}

// A joiner reported to the leader is still waiting when the leader's daemon
// dies (no commit admitted it: the ranks never commit). With failover the
// new leader's epoch is below the minimum of 3; the joiner's daemon reports
// it again to the new leader, which admits it: the job goes on at size 3.
TEST_F(ElasticAcrossDaemonsTest, AJoinerWaitingWhenTheLeaderFailsOverIsAdmittedByTheNewLeader) {
  startDaemons(3, {"--leader-failover", "quorum"});
  const std::vector<std::string> args = {"elastic_loop", "10", "0", "plain", "3"};
  const std::vector<int> placement = {0, 1, 2};
  const auto env = withMinimum(3);
  auto ranks = launchWith("el-failover-joiner", args, placement, env);
  ASSERT_TRUE(allLooping(ranks)) << logs();
  Process joiner = spawnJoiner(2, "el-failover-joiner", 3, args, env);
  ASSERT_TRUE(waitFor(
      [&] {
        return daemons_[0]->log().find("to join at the next commit (1 waiting across nodes)") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << logs();
  killDaemonWhenLooping(ranks, placement, 0);
  EXPECT_EQ(joiner.wait(kTimeout), 0) << joiner.log() << logs();
  for (int r : {1, 2}) EXPECT_EQ(ranks[r].wait(kTimeout), 0) << ranks[r].log() << logs();
  EXPECT_NE(joiner.log().find("size 3 rank 2"), std::string::npos) << joiner.log();
  EXPECT_NE(daemons_[1]->log().find("admitted 1 new ranks while the job was below its minimum of 3"), std::string::npos)
      << logs();
}

}  // namespace
}  // namespace gradsync::testutil
