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

}  // namespace
}  // namespace gradsync::membership
