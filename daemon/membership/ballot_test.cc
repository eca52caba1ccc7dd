// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/ballot.h"

#include "gtest/gtest.h"

namespace gradsync::membership {
namespace {

TEST(BallotTest, AStrictMajorityCountingItsOwnVoteTakesOverOnce) {
  Ballot ballot("b:1");
  ballot.leaderLost(3);
  EXPECT_TRUE(ballot.lostLeaderIn(3));
  EXPECT_FALSE(ballot.lostLeaderIn(2));
  // 5 daemons (the lost leader counted): 3 needed.
  auto first = ballot.receive("c:1", 3, 3);
  ASSERT_TRUE(first.isOk());
  EXPECT_FALSE(*first);  // b and c
  EXPECT_EQ(ballot.votes(), 2u);
  auto second = ballot.receive("d:1", 3, 3);
  ASSERT_TRUE(second.isOk());
  EXPECT_TRUE(*second);
  ballot.takingOver(3);
  EXPECT_TRUE(ballot.takingOverFrom(3));
  EXPECT_EQ(ballot.decided(3), nullptr);  // not announced yet: voters wait
  auto late = ballot.receive("e:1", 3, 3);
  ASSERT_TRUE(late.isOk());
  EXPECT_FALSE(*late);  // a second takeover never begins
  v1::NewEpoch change;
  change.set_epoch(4);
  ballot.tookOver(change);
  ASSERT_NE(ballot.decided(3), nullptr);
  EXPECT_EQ(ballot.decided(3)->epoch(), 4u);
  EXPECT_EQ(ballot.decided(2), nullptr);
}

TEST(BallotTest, TheSameVoterTwiceCountsOnce) {
  Ballot ballot("b:1");
  ASSERT_TRUE(ballot.receive("c:1", 2, 3).isOk());
  auto again = ballot.receive("c:1", 2, 3);
  ASSERT_TRUE(again.isOk());
  EXPECT_FALSE(*again);
  EXPECT_EQ(ballot.votes(), 2u);
}

TEST(BallotTest, VotesOfAnEarlierElectionDoNotCount) {
  Ballot ballot("c:1");
  ASSERT_TRUE(ballot.receive("d:1", 2, 3).isOk());  // epoch 2: c and d, no majority
  auto next = ballot.receive("e:1", 5, 3);          // epoch 5: c and e only
  ASSERT_TRUE(next.isOk());
  EXPECT_FALSE(*next);
  EXPECT_EQ(ballot.votes(), 2u);
}

TEST(BallotTest, ThreeDaemonsNeedTwoAndEpochZeroIsNeverTakenOverFrom) {
  Ballot ballot("b:1");
  auto votes = ballot.receive("c:1", 1, 2);
  ASSERT_TRUE(votes.isOk());
  EXPECT_TRUE(*votes);
  EXPECT_FALSE(ballot.takingOverFrom(0));
}

// A voter records whom it voted for: while that vote may count, it stands
// for no one itself (one voter never counts for two candidates); a refused
// or withdrawn vote frees it.
TEST(BallotTest, AVoterWhoseVoteMayCountRefusesVotesForItself) {
  Ballot voter("d:1");
  ASSERT_TRUE(voter.cast("b:1", 4).isOk());
  EXPECT_TRUE(voter.cast("b:1", 4).isOk());  // the same candidate again
  EXPECT_EQ(voter.cast("c:1", 4).code(), StatusCode::kFailedPrecondition);
  auto for_itself = voter.receive("e:1", 4, 3);
  ASSERT_FALSE(for_itself.isOk());
  EXPECT_NE(for_itself.status().message().find("voted for b:1"), std::string::npos);
  voter.uncast(4);  // b refused, or withdrew the vote when the call ended
  EXPECT_TRUE(voter.cast("c:1", 4).isOk());
  voter.uncast(4);
  auto now_for_itself = voter.receive("e:1", 4, 3);
  ASSERT_TRUE(now_for_itself.isOk());
  EXPECT_FALSE(*now_for_itself);  // d and e
  // Standing itself with a vote, it votes for no other.
  EXPECT_EQ(voter.cast("b:1", 4).code(), StatusCode::kFailedPrecondition);
  // A new election (epoch) starts clean.
  EXPECT_TRUE(voter.cast("b:1", 6).isOk());
}

// A voter that gave up waiting no longer counts: the candidate needs a
// majority of voters still waiting for it.
TEST(BallotTest, AWithdrawnVoteNoLongerCounts) {
  Ballot ballot("b:1");
  ASSERT_TRUE(ballot.receive("c:1", 2, 3).isOk());
  ballot.withdraw("c:1", 2);
  EXPECT_EQ(ballot.votes(), 1u);  // its own
  ballot.withdraw("b:1", 2);      // never its own
  EXPECT_EQ(ballot.votes(), 1u);
  auto next = ballot.receive("d:1", 2, 3);
  ASSERT_TRUE(next.isOk());
  EXPECT_FALSE(*next);  // b and d: c's vote is gone
  auto third = ballot.receive("c:1", 2, 3);
  ASSERT_TRUE(third.isOk());
  EXPECT_TRUE(*third);
  ballot.takingOver(2);
  ballot.withdraw("c:1", 2);  // too late: the takeover began with it
  EXPECT_EQ(ballot.votes(), 3u);
}

}  // namespace
}  // namespace gradsync::membership
