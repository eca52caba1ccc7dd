// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/builder.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::membership {
namespace {

v1::NodeInfo node(const std::string& address, std::vector<int> ranks) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  for (int r : ranks) n.add_ranks(r);
  return n;
}

TEST(BuilderTest, CompletesWhenEveryRankIsHeldAndOrdersByLowestRank) {
  MembershipBuilder m("j", 5);
  ASSERT_TRUE(m.add(node("b:1", {3, 4})).isOk());
  EXPECT_FALSE(m.complete());
  EXPECT_EQ(m.missingRanks(), (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(m.add(node("a:1", {0, 2})).isOk());
  ASSERT_TRUE(m.add(node("c:1", {1})).isOk());
  EXPECT_TRUE(m.complete());
  auto ordered = m.ordered();
  ASSERT_EQ(ordered.size(), 3u);
  EXPECT_EQ(ordered[0].peer_address(), "a:1");
  EXPECT_EQ(ordered[1].peer_address(), "c:1");
  EXPECT_EQ(ordered[2].peer_address(), "b:1");
  EXPECT_EQ(ordered[2].cross_rank(), 2);
}

TEST(BuilderTest, RejectsOverlapsAndBadRanks) {
  MembershipBuilder m("j", 4);
  ASSERT_TRUE(m.add(node("a:1", {0, 1})).isOk());
  Status overlap = m.add(node("b:1", {1, 2}));
  EXPECT_EQ(overlap.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(overlap.message(), ::testing::HasSubstr("rank 1 is already held by node a:1"));
  EXPECT_EQ(m.add(node("c:1", {4})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.add(node("d:1", {3, 2})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.add(node("e:1", {})).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(m.complete());  // failed adds changed nothing
  EXPECT_EQ(m.missingRanks(), (std::vector<int>{2, 3}));
}

}  // namespace
}  // namespace gradsync::membership
