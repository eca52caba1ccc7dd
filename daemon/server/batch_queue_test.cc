// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/batch_queue.h"

#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

coordinator::Response response(const std::string& name, uint64_t length = 16) {
  coordinator::Response r;
  r.name = name;
  r.type = v1::ALLREDUCE;
  r.ranks = {0};
  coordinator::Request q;
  q.rank = 0;
  q.name = name;
  q.length = length;
  r.requests.push_back(q);
  return r;
}

std::vector<std::string> names(const std::vector<coordinator::Response>& responses) {
  std::vector<std::string> out;
  for (const auto& r : responses) out.push_back(r.name);
  return out;
}

TEST(BatchQueueTest, OneBatchAtATimeOfEverythingReady) {
  BatchQueue queue;
  EXPECT_FALSE(queue.runnable());
  queue.addReady({response("a", 8), response("b", 24)});
  EXPECT_EQ(queue.bytesReady(), 32u);
  EXPECT_TRUE(queue.runnable());
  BatchQueue::Batch batch = queue.next(/*lead=*/false);
  EXPECT_EQ(names(batch.responses), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(batch.sequence, 0u);
  EXPECT_FALSE(batch.lead);
  EXPECT_TRUE(queue.executing());
  queue.addReady({response("c")});
  EXPECT_FALSE(queue.runnable());  // "a" and "b" still execute
  EXPECT_EQ(queue.inFlight(), 3u);
  queue.completed(2);
  EXPECT_EQ(queue.inFlight(), 1u);
  queue.finished();
  EXPECT_TRUE(queue.runnable());
}

TEST(BatchQueueTest, TheLeaderNumbersItsBatches) {
  BatchQueue queue;
  queue.addReady({response("a")});
  BatchQueue::Batch first = queue.next(/*lead=*/true);
  EXPECT_TRUE(first.lead);
  EXPECT_EQ(first.sequence, 1u);
  queue.finished();
  queue.addReady({response("b")});
  EXPECT_EQ(queue.next(true).sequence, 2u);
  queue.finished();
  // In the rounds: nothing ready, nothing begins, the number stays.
  BatchQueue::Batch none = queue.nextLed();
  EXPECT_TRUE(none.responses.empty());
  EXPECT_FALSE(queue.executing());
  EXPECT_EQ(queue.lastSequence(), 2u);
  queue.addReady({response("c")});
  BatchQueue::Batch third = queue.nextLed();
  EXPECT_EQ(third.sequence, 3u);
  EXPECT_EQ(names(third.responses), std::vector<std::string>{"c"});
  EXPECT_TRUE(queue.executing());
}

TEST(BatchQueueTest, AFollowerRunsTheLeadersBatchesInOrderWithTheirThreshold) {
  BatchQueue queue;
  queue.addRemote({{response("x")}, 7, 1 << 20, false});
  queue.addRemote({{response("y")}, 8, 0, false});
  BatchQueue::Batch first = queue.next(/*lead=*/true);  // a follower's queue holds the leader's first
  EXPECT_FALSE(first.lead);
  EXPECT_EQ(first.sequence, 7u);
  EXPECT_EQ(first.fusion_threshold_bytes, 1u << 20);
  EXPECT_EQ(names(first.responses), std::vector<std::string>{"x"});
  queue.finished();
  EXPECT_EQ(queue.next(true).sequence, 8u);
}

TEST(BatchQueueTest, TheRoundsTakeErrorsAndTheLeadersBatchesUpToTheirNumber) {
  BatchQueue queue;
  queue.addRemote({{response("e1")}, 0, 0, false});
  queue.addRemote({{response("e2")}, 0, 0, false});
  queue.addRemote({{response("x")}, 4, 0, false});
  EXPECT_EQ(names(queue.takeErrors()), (std::vector<std::string>{"e1", "e2"}));
  EXPECT_TRUE(queue.executing());
  queue.finished();
  EXPECT_FALSE(queue.reached(3));  // batch 4 is for a later round
  EXPECT_TRUE(queue.reached(5));   // batch 4 is due before round 5's
  EXPECT_FALSE(queue.takeRemoteUpTo(3).has_value());
  auto four = queue.takeRemoteUpTo(4);
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(four->sequence, 4u);
  queue.finished();
  EXPECT_TRUE(queue.reached(4));   // taken already
  EXPECT_FALSE(queue.reached(5));  // batch 5 has not come
  EXPECT_FALSE(queue.takeRemoteUpTo(4).has_value());
  EXPECT_TRUE(queue.takeErrors().empty());
  EXPECT_FALSE(queue.executing());  // no errors: nothing began
}

TEST(BatchQueueTest, AFailureTakesWhatIsReadyAndDropsTheLeadersBatches) {
  BatchQueue queue;
  queue.addReady({response("a")});
  queue.addRemote({{response("x")}, 1, 0, false});
  EXPECT_EQ(names(queue.takeAllWaiting()), std::vector<std::string>{"a"});
  EXPECT_FALSE(queue.hasRemote());
  EXPECT_FALSE(queue.runnable());
  EXPECT_EQ(queue.inFlight(), 0u);
}

}  // namespace
}  // namespace gradsync::server
