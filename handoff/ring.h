// SPDX-License-Identifier: Apache-2.0
// One direction of an arena's doorbell ring (see shm_layout.h): a
// single-producer single-consumer queue of small messages in shared memory,
// with futex wake-ups. The other side may be hostile: every index read from
// shared memory is checked, and each side keeps its own position privately.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "handoff/shm_layout.h"

namespace gradsync::handoff {

class RingProducer {
 public:
  RingProducer(RingIndices* indices, RingSlot* slots) : indices_(indices), slots_(slots) {}
  // Appends one message and wakes a sleeping consumer. False when the message
  // does not fit a slot or the ring is full (or the consumer's index is
  // corrupt): send it another way. Callers serialise calls.
  bool push(const std::string& bytes);

 private:
  RingIndices* indices_;
  RingSlot* slots_;
  uint32_t tail_ = 0;  // our own copy: never trust the shared one
};

class RingConsumer {
 public:
  RingConsumer(RingIndices* indices, RingSlot* slots) : indices_(indices), slots_(slots) {}
  // Takes the next message if there is one: OK with *got = false when empty;
  // DATA_LOSS when the producer's index or a length is corrupt.
  Status pop(std::string* out, bool* got);
  // Sleeps until the producer may have appended, at most `timeout`. With
  // `spin` > 0 it first polls the ring that long, yielding the CPU between
  // polls, and sleeps only if nothing came: the producer then skips its
  // futex wake, and no CPU goes idle (waking an idle virtual CPU costs
  // some 10 us). For a thread that has nothing else to do while it waits.
  void wait(std::chrono::milliseconds timeout, std::chrono::microseconds spin = {});
  // Wakes a consumer sleeping in wait() (used to stop it).
  static void wakeAll(RingIndices* indices);

 private:
  RingIndices* indices_;
  RingSlot* slots_;
  std::atomic<uint32_t> head_{0};  // atomic: wait() may run beside pop()
};

}  // namespace gradsync::handoff
