// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/awaiting_leader.h"

#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

coordinator::Request request(int rank, uint64_t handle, const std::string& name = "t") {
  coordinator::Request r;
  r.rank = rank;
  r.handle = handle;
  r.name = name;
  return r;
}

TEST(AwaitingLeader, RequestsBeforeTheStartAreReplayedInOrderAndNoneAfter) {
  AwaitingLeader awaiting;
  EXPECT_FALSE(awaiting.started());
  coordinator::Request a = request(1, 10, "a"), b = request(2, 11, "b");
  EXPECT_TRUE(awaiting.holdUntilStarted(nullptr, a));
  EXPECT_TRUE(awaiting.holdUntilStarted(nullptr, b));
  const auto early = awaiting.start();
  EXPECT_TRUE(awaiting.started());
  ASSERT_EQ(early.size(), 2u);
  EXPECT_EQ(early[0].second.name, "a");
  EXPECT_EQ(early[1].second.name, "b");
  coordinator::Request c = request(1, 12, "c");
  EXPECT_FALSE(awaiting.holdUntilStarted(nullptr, c));
  EXPECT_EQ(c.name, "c");  // untouched
  EXPECT_TRUE(awaiting.takeEarly().empty());
}

TEST(AwaitingLeader, AForwardedRequestIsAwaitedUntilAnsweredOrItsBatchStarts) {
  AwaitingLeader awaiting;
  awaiting.forwarded(request(1, 10));
  awaiting.forwarded(request(1, 11));
  awaiting.forwarded(request(2, 10));
  EXPECT_EQ(awaiting.forwardedCount(), 3u);
  awaiting.answered(1, 11);
  awaiting.answered(3, 10);  // not forwarded: nothing
  EXPECT_EQ(awaiting.forwardedCount(), 2u);
  coordinator::Response batch;
  batch.requests.push_back(request(1, 10));
  batch.requests.push_back(std::nullopt);    // a rank that joined
  batch.requests.push_back(request(0, 10));  // the leader's own
  awaiting.batchStarts({batch});
  EXPECT_EQ(awaiting.forwardedCount(), 1u);
  awaiting.forwarded(request(2, 11));
  coordinator::Response done;
  done.requests.push_back(request(2, 11));
  awaiting.completed(done);
  EXPECT_EQ(awaiting.forwardedCount(), 1u);
  const auto left = awaiting.takeForwarded();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rank, 2);
  EXPECT_EQ(awaiting.forwardedCount(), 0u);
  EXPECT_TRUE(awaiting.takeForwarded().empty());
}

TEST(AwaitingLeader, AFailureTakesTheEarlyRequestsOnce) {
  AwaitingLeader awaiting;
  coordinator::Request a = request(1, 10);
  ASSERT_TRUE(awaiting.holdUntilStarted(nullptr, a));
  EXPECT_EQ(awaiting.takeEarly().size(), 1u);
  EXPECT_TRUE(awaiting.takeEarly().empty());
  EXPECT_FALSE(awaiting.started());
}

}  // namespace
}  // namespace gradsync::server
