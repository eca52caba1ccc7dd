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

// Member `name` of group 9 (of `size` members), ranks 0..3 as above.
coordinator::Response member(const std::string& name, uint32_t size) {
  coordinator::Response response = cached(name);
  for (auto& r : response.requests.mutableAll()) {
    r->group_id = 9;
    r->group_size = size;
  }
  return response;
}

coordinator::Request grouped(int rank, const std::string& name, uint64_t handle) {
  coordinator::Request r = request(rank, name, handle);
  r.group_id = 9;
  r.group_size = 2;
  return r;
}

TEST(SteadyState, AGroupIsReadyOnlyWhole) {
  SteadyState state;
  const auto t0 = SteadyState::Clock::now();
  state.learn(1, member("a", 2), {1, 2});
  state.learn(2, member("b", 2), {1, 2});
  state.learn(3, cached("c"), {1, 2});
  EXPECT_FALSE(state.hold(1, {nullptr, grouped(1, "a", 1), t0}));
  EXPECT_FALSE(state.hold(1, {nullptr, grouped(2, "a", 2), t0}));  // "a" ready, "b" not
  EXPECT_TRUE(state.isReady(1));
  EXPECT_TRUE(state.ready().empty());
  EXPECT_FALSE(state.hold(3, {nullptr, request(1, "c", 3), t0}));
  EXPECT_TRUE(state.hold(3, {nullptr, request(2, "c", 4), t0}));  // not grouped: ready alone
  EXPECT_EQ(state.ready(), (std::vector<uint64_t>{3}));
  EXPECT_FALSE(state.hold(2, {nullptr, grouped(1, "b", 5), t0}));
  EXPECT_TRUE(state.hold(2, {nullptr, grouped(2, "b", 6), t0}));  // the group is whole
  EXPECT_EQ(state.ready(), (std::vector<uint64_t>{1, 2, 3}));
  // Every daemon offered both members: they run; one only (another daemon's
  // ranks asked for another version of "a"): neither does.
  EXPECT_EQ(state.runnable({1, 2, 3}), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(state.runnable({2, 3}), (std::vector<uint64_t>{3}));
  EXPECT_EQ(state.runnable({2}), (std::vector<uint64_t>{}));
}

TEST(SteadyState, AMemberHeldTooLongTakesItsGroupToTheLeader) {
  SteadyState state;
  const auto t0 = SteadyState::Clock::now();
  const auto later = t0 + std::chrono::milliseconds(100);
  state.learn(1, member("a", 2), {1, 2});
  state.learn(2, member("b", 2), {1, 2});
  state.learn(3, cached("c"), {1, 2});
  state.hold(1, {nullptr, grouped(1, "a", 1), t0});
  state.hold(2, {nullptr, grouped(2, "b", 2), later});
  state.hold(3, {nullptr, request(1, "c", 3), later});
  auto old = state.takeOlderThan(t0 + std::chrono::milliseconds(10));
  ASSERT_EQ(old.size(), 2u);  // "a", and "b" with it; not "c"
  EXPECT_EQ(old[0].request.name, "a");
  EXPECT_EQ(old[1].request.name, "b");
  EXPECT_FALSE(state.holds(1, "a"));
  EXPECT_FALSE(state.holds(2, "b"));
  EXPECT_TRUE(state.holds(1, "c"));
  auto rest = state.takeAll();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_FALSE(state.holds(1, "c"));
  // A member that goes to the leader takes the others held with it.
  state.hold(1, {nullptr, grouped(1, "a", 7), later});
  state.hold(1, {nullptr, grouped(2, "a", 8), later});
  EXPECT_EQ(state.takeGroup(9).size(), 2u);
  EXPECT_TRUE(state.takeGroup(9).empty());
  EXPECT_TRUE(state.takeGroup(10).empty());  // unknown
  EXPECT_TRUE(state.empty());
}

}  // namespace
}  // namespace gradsync::server
