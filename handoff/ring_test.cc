// SPDX-License-Identifier: Apache-2.0
#include "handoff/ring.h"

#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace gradsync::handoff {
namespace {

class RingOrderTest : public ::testing::TestWithParam<int> {};

// Sleeping consumers (spin 0) and polling ones lose and reorder nothing.
TEST_P(RingOrderTest, MessagesArriveInOrderAcrossThreads) {
  const std::chrono::microseconds spin(GetParam());
  auto control = std::make_unique<ArenaControl>();
  RingProducer producer(&control->submit, control->submit_slots);
  RingConsumer consumer(&control->submit, control->submit_slots);
  constexpr int kMessages = 10000;
  std::thread writer([&] {
    for (int i = 0; i < kMessages;) {
      if (producer.push("message " + std::to_string(i))) ++i;
    }
  });
  for (int expected = 0; expected < kMessages;) {
    std::string got;
    bool ok = false;
    ASSERT_TRUE(consumer.pop(&got, &ok).isOk());
    if (!ok) {
      consumer.wait(std::chrono::milliseconds(100), spin);
      continue;
    }
    ASSERT_EQ(got, "message " + std::to_string(expected));
    ++expected;
  }
  writer.join();
}

INSTANTIATE_TEST_SUITE_P(Spins, RingOrderTest, ::testing::Values(0, 1, 50));

TEST(RingTest, ASpinningWaitOnAnEmptyRingStillEndsAtItsTimeout) {
  auto control = std::make_unique<ArenaControl>();
  RingConsumer consumer(&control->complete, control->complete_slots);
  const auto start = std::chrono::steady_clock::now();
  consumer.wait(std::chrono::milliseconds(20), std::chrono::microseconds(500));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(20));
  EXPECT_LT(waited, std::chrono::seconds(2));
}

TEST(RingTest, ASpinningWaitReturnsWhenAMessageComes) {
  auto control = std::make_unique<ArenaControl>();
  RingProducer producer(&control->complete, control->complete_slots);
  RingConsumer consumer(&control->complete, control->complete_slots);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(producer.push("done"));
  });
  const auto start = std::chrono::steady_clock::now();
  // A spin of 10 s: only the message can end it in time.
  consumer.wait(std::chrono::milliseconds(20000), std::chrono::seconds(10));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  writer.join();
  std::string got;
  bool ok = false;
  ASSERT_TRUE(consumer.pop(&got, &ok).isOk());
  EXPECT_TRUE(ok);
  EXPECT_EQ(got, "done");
}

TEST(RingTest, FullRingAndOversizedMessagesAreRefused) {
  auto control = std::make_unique<ArenaControl>();
  RingProducer producer(&control->complete, control->complete_slots);
  EXPECT_FALSE(producer.push(std::string(kRingSlotBytes, 'x')));
  for (uint32_t i = 0; i < kRingSlots; ++i) ASSERT_TRUE(producer.push("m"));
  EXPECT_FALSE(producer.push("m"));
}

TEST(RingTest, CorruptIndicesAndLengthsAreDetected) {
  auto control = std::make_unique<ArenaControl>();
  RingConsumer consumer(&control->submit, control->submit_slots);
  std::string out;
  bool got = true;
  control->submit.tail = kRingSlots + 5;  // a hostile producer
  EXPECT_EQ(consumer.pop(&out, &got).code(), StatusCode::kDataLoss);
  control->submit.tail = 1;
  control->submit_slots[0].length = 100000;
  EXPECT_EQ(consumer.pop(&out, &got).code(), StatusCode::kDataLoss);
  // A corrupt consumer head makes the producer refuse instead of overwrite.
  RingProducer producer(&control->complete, control->complete_slots);
  control->complete.head = 12345;
  EXPECT_FALSE(producer.push("m"));
}

}  // namespace
}  // namespace gradsync::handoff
