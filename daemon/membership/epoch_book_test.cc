// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/epoch_book.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::membership {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::NodeInfo node(const std::string& address, std::vector<int> ranks, int cross_rank) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  n.set_hostname("host-" + address);
  n.set_cross_rank(cross_rank);
  for (int r : ranks) {
    n.add_ranks(r);
    n.add_pids(1000 + r);
  }
  return n;
}

std::vector<int> ranksOf(const v1::NodeInfo& n) { return {n.ranks().begin(), n.ranks().end()}; }

// Leader a:1 (ranks 0, 1), b:1 (2, 3), c:1 (4, 5), at epoch 1.
EpochBook threeNodes(const std::string& self = "a:1", int min_size = 0) {
  EpochBook book("j", self, min_size);
  book.form({node("a:1", {0, 1}, 0), node("b:1", {2, 3}, 1), node("c:1", {4, 5}, 2)}, 1);
  return book;
}

TEST(EpochBookTest, LosingANodesRanksRemovesItAndRenumbersTheSurvivorsInOrder) {
  EpochBook book = threeNodes();
  auto change = book.lose({2, 3}, 1, "node b:1 went silent");
  ASSERT_TRUE(change.isOk()) << change.status().message();
  EXPECT_EQ(change->epoch(), 2u);
  EXPECT_EQ(change->cause(), "node b:1 went silent");
  EXPECT_THAT(change->survivors(), ElementsAre(0, 1, 4, 5));
  EXPECT_FALSE(change->below_minimum());
  ASSERT_EQ(book.members().size(), 2u);
  EXPECT_EQ(book.members()[1].peer_address(), "c:1");
  EXPECT_EQ(book.members()[1].cross_rank(), 1);
  EXPECT_EQ(ranksOf(book.members()[1]), (std::vector<int>{2, 3}));
  EXPECT_THAT(book.members()[1].pids(), ElementsAre(1004, 1005));  // pids follow their ranks
  EXPECT_EQ(book.epoch(), 2u);

  EXPECT_THAT(book.removedWhy("b:1"), HasSubstr("node b:1 (host host-b:1, ranks [2, 3]) was removed from job 'j' at "
                                                "epoch 2 (node b:1 went silent)"));
  const auto removed = book.check("b:1");
  EXPECT_FALSE(removed.member());
  EXPECT_EQ(removed.removed(), book.removedWhy("b:1"));
  EXPECT_TRUE(book.check("c:1").member());
  EXPECT_EQ(book.check("c:1").epoch(), 2u);
  EXPECT_FALSE(book.check("z:1").member());
  EXPECT_TRUE(book.check("z:1").removed().empty());
}

TEST(EpochBookTest, TranslatesOldRanksThroughEveryEpochAndRefusesLossesAlreadyTaken) {
  EpochBook book = threeNodes();
  ASSERT_TRUE(book.lose({2}, 1, "rank 2 crashed").isOk());  // epoch 2: 0 1 [3->2] [4->3] [5->4]
  ASSERT_TRUE(book.lose({0}, 2, "rank 0 crashed").isOk());  // epoch 3: [1->0] [2->1] ...
  EXPECT_EQ(book.translate(5, 1), 3);
  EXPECT_EQ(book.translate(4, 2), 3);
  EXPECT_EQ(book.translate(2, 1), -1);  // lost in epoch 1
  EXPECT_EQ(book.translate(0, 2), -1);  // lost in epoch 2
  EXPECT_EQ(book.translate(0, 4), -1);  // an epoch to come
  // Both reports of the same loss (the rank's own and its node's) start
  // one epoch: the second finds nothing left to lose.
  auto again = book.lose({2}, 1, "rank 2's node went silent");
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(book.epoch(), 3u);
  // A later loss named in old numbering reaches the right rank.
  auto change = book.lose({5}, 1, "rank 5 crashed");
  ASSERT_TRUE(change.isOk());
  EXPECT_THAT(change->survivors(), ElementsAre(0, 1, 2));
}

TEST(EpochBookTest, TheLeadersNodeNeverEmptiesAndAFailedEpochChangesNothing) {
  EpochBook book = threeNodes();
  auto change = book.lose({0, 1}, 1, "ranks 0 and 1 crashed");
  EXPECT_EQ(change.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(change.status().message(), HasSubstr("the leader's node (a:1) would hold no rank"));
  EXPECT_EQ(book.epoch(), 1u);
  EXPECT_EQ(book.members().size(), 3u);
  EXPECT_EQ(book.translate(4, 1), 4);
}

TEST(EpochBookTest, ANodeWhoseLastRankDiesKeepsItsPlaceWhenNewRanksWaitThere) {
  EpochBook book = threeNodes();
  book.addJoiner({"b:1", 7, 4242});
  book.addJoiner({"c:1", 8, 4343});
  auto change = book.lose({2, 3}, 1, "ranks 2 and 3 crashed");
  ASSERT_TRUE(change.isOk());
  ASSERT_EQ(change->admitted_size(), 1);
  EXPECT_EQ(change->admitted(0).peer_address(), "b:1");
  EXPECT_EQ(change->admitted(0).joiner_id(), 7u);
  EXPECT_EQ(change->admitted(0).rank(), 4);  // after the four survivors
  ASSERT_NE(book.member("b:1"), nullptr);
  EXPECT_EQ(ranksOf(*book.member("b:1")), (std::vector<int>{4}));
  EXPECT_THAT(book.member("b:1")->pids(), ElementsAre(4242));
  EXPECT_EQ(book.joinerCount(), 1u);  // c:1's waits for the next commit
  EXPECT_TRUE(book.removedWhy("b:1").empty());
}

TEST(EpochBookTest, ACommitAdmitsEveryJoinerNodeByNodeAndACandidateBecomesAMember) {
  EpochBook book = threeNodes("a:1", /*min_size=*/8);
  v1::NodeInfo candidate = node("d:1", {}, 0);
  ASSERT_TRUE(book.addCandidate(candidate).isOk());
  EXPECT_TRUE(book.isCandidate("d:1"));
  EXPECT_EQ(book.member("d:1"), nullptr);
  book.addJoiner({"d:1", 3, 99});
  book.addJoiner({"b:1", 4, 98});
  book.removeJoiner("b:1", 4);  // left before the commit
  book.addJoiner({"c:1", 5, 97});
  auto change = book.admit({11}, "at the commit 'x'");
  ASSERT_TRUE(change.isOk());
  EXPECT_EQ(change->cause(), "admitted 3 new ranks at the commit 'x'");
  ASSERT_EQ(change->admitted_size(), 3);
  EXPECT_EQ(change->admitted(0).peer_address(), "a:1");
  EXPECT_EQ(change->admitted(0).rank(), 6);
  EXPECT_EQ(change->admitted(1).peer_address(), "c:1");  // the members' before the candidates'
  EXPECT_EQ(change->admitted(1).rank(), 7);
  EXPECT_EQ(change->admitted(2).peer_address(), "d:1");
  EXPECT_EQ(change->admitted(2).rank(), 8);
  EXPECT_FALSE(change->below_minimum());  // 9 ranks, 8 needed
  EXPECT_FALSE(book.isCandidate("d:1"));
  ASSERT_NE(book.member("d:1"), nullptr);
  EXPECT_EQ(book.member("d:1")->cross_rank(), 3);  // ring order: the leader, then by lowest rank
  EXPECT_EQ(ranksOf(*book.member("a:1")), (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(book.joinerCount(), 0u);

  // The ranks were told a commit admits joiners: an epoch comes all the same.
  auto empty = book.admit({}, "at the commit 'y'");
  ASSERT_TRUE(empty.isOk());
  EXPECT_EQ(empty->epoch(), 3u);
  EXPECT_EQ(empty->cause(), "new ranks were to join at the commit 'y', and left meanwhile");
}

TEST(EpochBookTest, BelowTheMinimumTheEpochSaysSo) {
  EpochBook book = threeNodes("a:1", /*min_size=*/6);
  auto change = book.lose({4}, 1, "rank 4 crashed");
  ASSERT_TRUE(change.isOk());
  EXPECT_TRUE(change->below_minimum());
}

TEST(EpochBookTest, CandidatesAreCheckedAndARemovedNodeMayComeBackAsANewOne) {
  EpochBook forming("j", "a:1", 0);
  EXPECT_EQ(forming.addCandidate(node("d:1", {}, 0)).code(), StatusCode::kNotFound);  // not formed: retried
  EpochBook book = threeNodes();
  EXPECT_EQ(book.addCandidate(node("b:1", {}, 0)).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(book.addCandidate(node("d:1", {9}, 0)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(book.lose({2, 3}, 1, "b:1 went silent").isOk());
  ASSERT_FALSE(book.removedWhy("b:1").empty());
  ASSERT_TRUE(book.addCandidate(node("b:1", {}, 0)).isOk());
  EXPECT_TRUE(book.removedWhy("b:1").empty());
  book.addJoiner({"b:1", 1, 1});
  EXPECT_TRUE(book.dropCandidate("b:1"));
  EXPECT_EQ(book.joinerCount(), 0u);  // its joiners went with it
  EXPECT_FALSE(book.dropCandidate("b:1"));
}

TEST(EpochBookTest, TakingOverPutsThisDaemonFirstAndRemovesTheLostLeader) {
  EpochBook book = threeNodes("c:1");
  EXPECT_EQ(book.selfCrossRank(), 2);
  auto change = book.takeOver();
  ASSERT_TRUE(change.isOk()) << change.status().message();
  EXPECT_THAT(change->survivors(), ElementsAre(2, 3, 4, 5));
  ASSERT_EQ(book.members().size(), 2u);
  EXPECT_EQ(book.members()[0].peer_address(), "c:1");
  EXPECT_EQ(book.selfCrossRank(), 0);
  EXPECT_EQ(ranksOf(book.members()[0]), (std::vector<int>{2, 3}));
  EXPECT_EQ(ranksOf(book.members()[1]), (std::vector<int>{0, 1}));  // b:1's, renumbered
  EXPECT_THAT(book.removedWhy("a:1"), HasSubstr("was the leader and is lost; the job failed over"));
  EXPECT_EQ(book.takeOver().status().code(), StatusCode::kFailedPrecondition);  // leads already
}

TEST(EpochBookTest, AFollowerAppliesOnlyNewerEpochsAndNoticesItsRemoval) {
  EpochBook leader = threeNodes();
  EpochBook follower = threeNodes("c:1");
  auto change = leader.lose({2, 3}, 1, "b:1 went silent");
  ASSERT_TRUE(change.isOk());
  EXPECT_EQ(follower.apply(*change), EpochBook::Applied::kApplied);
  EXPECT_EQ(follower.epoch(), 2u);
  EXPECT_EQ(follower.selfCrossRank(), 1);
  EXPECT_EQ(follower.apply(*change), EpochBook::Applied::kStale);

  EpochBook removed = threeNodes("b:1");
  EXPECT_EQ(removed.apply(*change), EpochBook::Applied::kRemoved);
  EXPECT_EQ(removed.epoch(), 1u);  // its membership stays as it was
  EXPECT_EQ(removed.selfCrossRank(), 1);
}

}  // namespace
}  // namespace gradsync::membership
