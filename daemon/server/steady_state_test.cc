// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/steady_state.h"

#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

coordinator::Request request(int rank, const std::string& name, uint64_t handle) {
  coordinator::Request r;
  r.rank = rank;
  r.name = name;
  r.handle = handle;
  r.type = v1::ALLREDUCE;
  return r;
}

// The leader's response for ranks 0..3, ranks 1 and 2 on this node.
coordinator::Response cached(const std::string& name) {
  coordinator::Response response;
  response.name = name;
  response.type = v1::ALLREDUCE;
  for (int rank = 0; rank < 4; ++rank) {
    response.ranks.push_back(rank);
    response.requests.push_back(request(rank, name, 1000 + rank));
  }
  return response;
}

TEST(SteadyState, ReadyOnceEveryLocalRankHoldsAndTakenWithTheirOwnRequests) {
  SteadyState state;
  const auto t0 = SteadyState::Clock::now();
  state.learn(7, cached("w"), {1, 2});
  EXPECT_FALSE(state.canHold(7, 0));  // another node's rank
  EXPECT_FALSE(state.canHold(8, 1));  // unknown
  ASSERT_TRUE(state.canHold(7, 1));
  state.hold(7, {nullptr, request(1, "w", 11), t0});
  EXPECT_TRUE(state.ready().empty());
  EXPECT_TRUE(state.holds(1, "w"));
  EXPECT_FALSE(state.holds(2, "w"));
  state.hold(7, {nullptr, request(2, "w", 12), t0});
  state.hold(7, {nullptr, request(2, "w", 22), t0});  // the next step's, early
  EXPECT_EQ(state.ready(), (std::vector<uint64_t>{7}));
  auto response = state.take(7);
  ASSERT_EQ(response.requests.size(), 4u);
  EXPECT_EQ(response.requests[0]->handle, 1000u);  // the leader's copy for remote ranks
  EXPECT_EQ(response.requests[1]->handle, 11u);
  EXPECT_EQ(response.requests[2]->handle, 12u);  // the oldest first
  EXPECT_TRUE(state.ready().empty());            // rank 1 has nothing for the next step yet
  EXPECT_FALSE(state.empty());
}

TEST(SteadyState, RequestsHeldTooLongAreReleasedOldestFirst) {
  SteadyState state;
  const auto t0 = SteadyState::Clock::now();
  state.learn(1, cached("a"), {1, 2});
  state.learn(2, cached("b"), {1, 2});
  state.learn(3, coordinator::Response(), {});  // not for the rounds
  EXPECT_FALSE(state.canHold(3, 1));
  state.hold(1, {nullptr, request(1, "a", 1), t0});
  state.hold(2, {nullptr, request(2, "b", 2), t0 + std::chrono::milliseconds(30)});
  EXPECT_EQ(*state.oldest(), t0);
  auto old = state.takeOlderThan(t0 + std::chrono::milliseconds(10));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].request.name, "a");
  EXPECT_EQ(*state.oldest(), t0 + std::chrono::milliseconds(30));
  EXPECT_EQ(state.takeAll().size(), 1u);
  EXPECT_TRUE(state.empty());
  EXPECT_FALSE(state.oldest().has_value());
}

}  // namespace
}  // namespace gradsync::server
