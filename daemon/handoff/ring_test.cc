// SPDX-License-Identifier: Apache-2.0
#include "daemon/handoff/ring.h"

#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace gradsync::handoff {
namespace {

TEST(RingTest, MessagesArriveInOrderAcrossThreads) {
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
      consumer.wait(std::chrono::milliseconds(100));
      continue;
    }
    ASSERT_EQ(got, "message " + std::to_string(expected));
    ++expected;
  }
  writer.join();
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
