// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/outbox.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;

SharedMessage heartbeat(int64_t sent_ms) {
  v1::LeaderMessage message;
  message.mutable_heartbeat()->set_sent_ms(sent_ms);
  return share(std::move(message));
}

TEST(OutboxTest, OneWriteInFlightAndTheRestInOrder) {
  Outbox outbox({16, 1 << 20});
  EXPECT_EQ(outbox.push(heartbeat(1)), Outbox::Push::kWriteFront);
  EXPECT_EQ(outbox.front()->heartbeat().sent_ms(), 1);
  EXPECT_EQ(outbox.push(heartbeat(2)), Outbox::Push::kQueued);
  EXPECT_EQ(outbox.push(heartbeat(3)), Outbox::Push::kQueued);
  auto after = outbox.written(true);
  ASSERT_NE(after.next, nullptr);
  EXPECT_EQ(after.next->heartbeat().sent_ms(), 2);
  after = outbox.written(true);
  ASSERT_NE(after.next, nullptr);
  EXPECT_EQ(after.next->heartbeat().sent_ms(), 3);
  after = outbox.written(true);
  EXPECT_EQ(after.next, nullptr);
  EXPECT_FALSE(after.finish);
  // Idle again: the next message is written at once.
  EXPECT_EQ(outbox.push(heartbeat(4)), Outbox::Push::kWriteFront);
}

TEST(OutboxTest, PastTheMessageLimitItOverflowsClosesAndSaysWhatWaited) {
  Outbox outbox({3, 1 << 20});
  EXPECT_EQ(outbox.push(heartbeat(1)), Outbox::Push::kWriteFront);
  EXPECT_EQ(outbox.push(heartbeat(2)), Outbox::Push::kQueued);
  EXPECT_EQ(outbox.push(heartbeat(3)), Outbox::Push::kQueued);
  EXPECT_EQ(outbox.push(heartbeat(4)), Outbox::Push::kOverflow);
  EXPECT_THAT(outbox.overflow(), HasSubstr("4 messages"));
  EXPECT_EQ(outbox.push(heartbeat(5)), Outbox::Push::kClosed);
  // The cut cancels the call; the write in flight fails meanwhile: the
  // stream finishes only once the cancellation was made.
  const auto after = outbox.written(false);
  EXPECT_EQ(after.next, nullptr);
  EXPECT_FALSE(after.finish);
  EXPECT_TRUE(outbox.cancelled());
  EXPECT_FALSE(outbox.closeWhenWritten());  // said once
}

TEST(OutboxTest, AfterAnOverflowTheStreamFinishesOnceTheCallIsCancelledAndTheWriteEnded) {
  Outbox outbox({2, 1 << 20});
  EXPECT_EQ(outbox.push(heartbeat(1)), Outbox::Push::kWriteFront);
  EXPECT_EQ(outbox.push(heartbeat(2)), Outbox::Push::kQueued);
  EXPECT_EQ(outbox.push(heartbeat(3)), Outbox::Push::kOverflow);
  EXPECT_FALSE(outbox.cancelled());         // a write is still in flight
  const auto after = outbox.written(true);  // it went out after all
  EXPECT_EQ(after.next, nullptr);           // what waited was dropped
  EXPECT_TRUE(after.finish);
}

TEST(OutboxTest, PastTheByteLimitItOverflows) {
  const SharedMessage beat = heartbeat(1);
  Outbox outbox({1000, 3 * beat.bytes});
  EXPECT_EQ(outbox.push(beat), Outbox::Push::kWriteFront);
  EXPECT_EQ(outbox.push(beat), Outbox::Push::kQueued);
  EXPECT_EQ(outbox.push(beat), Outbox::Push::kQueued);
  EXPECT_EQ(outbox.push(beat), Outbox::Push::kOverflow);
}

TEST(OutboxTest, WrittenMessagesFreeTheirRoom) {
  Outbox outbox({2, 1 << 20});
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(outbox.push(heartbeat(i)), Outbox::Push::kWriteFront);
    ASSERT_EQ(outbox.push(heartbeat(i)), Outbox::Push::kQueued);
    ASSERT_NE(outbox.written(true).next, nullptr);
    ASSERT_EQ(outbox.written(true).next, nullptr);
  }
}

TEST(OutboxTest, ClosedItFinishesOnceWhatWaitedIsWritten) {
  Outbox outbox({16, 1 << 20});
  EXPECT_EQ(outbox.push(heartbeat(1)), Outbox::Push::kWriteFront);
  EXPECT_EQ(outbox.push(heartbeat(2)), Outbox::Push::kQueued);
  EXPECT_FALSE(outbox.closeWhenWritten());  // two to write first
  EXPECT_EQ(outbox.push(heartbeat(3)), Outbox::Push::kClosed);
  auto after = outbox.written(true);
  ASSERT_NE(after.next, nullptr);
  EXPECT_FALSE(after.finish);
  after = outbox.written(true);
  EXPECT_EQ(after.next, nullptr);
  EXPECT_TRUE(after.finish);
  EXPECT_FALSE(outbox.closeWhenWritten());  // said once
}

TEST(OutboxTest, ClosedWhileIdleItFinishesAtOnce) {
  Outbox outbox({16, 1 << 20});
  EXPECT_TRUE(outbox.closeWhenWritten());
  EXPECT_FALSE(outbox.closeWhenWritten());
}

TEST(OutboxTest, ABrokenWriteDropsWhatWaitsAndFinishesWhenClosed) {
  Outbox outbox({16, 1 << 20});
  EXPECT_EQ(outbox.push(heartbeat(1)), Outbox::Push::kWriteFront);
  EXPECT_EQ(outbox.push(heartbeat(2)), Outbox::Push::kQueued);
  const auto after = outbox.written(false);
  EXPECT_EQ(after.next, nullptr);
  EXPECT_FALSE(after.finish);  // nobody asked it to finish yet
  EXPECT_EQ(outbox.push(heartbeat(3)), Outbox::Push::kClosed);
  EXPECT_TRUE(outbox.closeWhenWritten());
}

}  // namespace
}  // namespace gradsync::peer
