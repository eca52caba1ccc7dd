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

// Labels group the nodes of a rack or switch in the ring; the ring is
// turned so that the node of rank 0 (the leader's) stays first.
TEST(BuilderTest, OrdersByTopologyLabelThenLowestRankWithRankZeroFirst) {
  MembershipBuilder m("j", 6);
  const char* labels[] = {"rack-b", "rack-a", "rack-b", "rack-a/switch-2", "", "rack-a"};
  for (int r = 0; r < 6; ++r) {
    v1::NodeInfo n = node("n" + std::to_string(r) + ":1", {r});
    n.set_topology(labels[r]);
    ASSERT_TRUE(m.add(n).isOk());
  }
  // By label: "" (4), rack-a (1, 5), rack-a/switch-2 (3), rack-b (0, 2);
  // turned to start at rank 0.
  std::vector<std::string> order;
  for (const auto& n : m.ordered()) {
    EXPECT_EQ(n.cross_rank(), static_cast<int>(order.size()));
    order.push_back(n.peer_address());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"n0:1", "n2:1", "n4:1", "n1:1", "n5:1", "n3:1"}));
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
