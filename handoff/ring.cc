// SPDX-License-Identifier: Apache-2.0
#include "handoff/ring.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>

namespace gradsync::handoff {
namespace {

// The indices live in memory shared with another process: access them as
// atomics (lock-free 32-bit atomics are address-free).
std::atomic<uint32_t>& atom(uint32_t& word) { return *reinterpret_cast<std::atomic<uint32_t>*>(&word); }

void futexWake(uint32_t* word) { ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

void futexWait(uint32_t* word, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

}  // namespace

bool RingProducer::push(const std::string& bytes) {
  if (bytes.size() > sizeof(RingSlot::bytes)) return false;
  const uint32_t head = atom(indices_->head).load(std::memory_order_acquire);
  if (tail_ - head >= kRingSlots) return false;  // full, or a corrupt head
  RingSlot& slot = slots_[tail_ % kRingSlots];
  slot.length = static_cast<uint32_t>(bytes.size());
  std::memcpy(slot.bytes, bytes.data(), bytes.size());
  ++tail_;
  // seq_cst store and load (not release + fence): with the consumer's
  // seq_cst increment and load in wait(), either it sees the new tail or
  // we see it waiting; and ThreadSanitizer understands it (not fences).
  atom(indices_->tail).store(tail_, std::memory_order_seq_cst);
  if (atom(indices_->waiting).load(std::memory_order_seq_cst) != 0) futexWake(&indices_->tail);
  return true;
}

Status RingConsumer::pop(std::string* out, bool* got) {
  *got = false;
  const uint32_t head = head_.load(std::memory_order_relaxed);
  const uint32_t tail = atom(indices_->tail).load(std::memory_order_acquire);
  if (tail == head) return okStatus();
  if (tail - head > kRingSlots) return Status(StatusCode::kDataLoss, "ring tail index out of range");
  const RingSlot& slot = slots_[head % kRingSlots];
  // Copy the length once: the producer could change it under us.
  const uint32_t length = atom(const_cast<uint32_t&>(slot.length)).load(std::memory_order_relaxed);
  if (length > sizeof(RingSlot::bytes)) return Status(StatusCode::kDataLoss, "ring slot length out of range");
  out->assign(reinterpret_cast<const char*>(slot.bytes), length);
  head_.store(head + 1, std::memory_order_relaxed);
  atom(indices_->head).store(head + 1, std::memory_order_release);
  *got = true;
  return okStatus();
}

void RingConsumer::wait(std::chrono::milliseconds timeout, std::chrono::microseconds spin) {
  if (spin.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + spin;
    do {
      if (atom(indices_->tail).load(std::memory_order_acquire) != head_.load(std::memory_order_relaxed)) return;
      sched_yield();
    } while (std::chrono::steady_clock::now() < until);
  }
  // A count, not a flag: several client threads may wait at once.
  atom(indices_->waiting).fetch_add(1, std::memory_order_seq_cst);
  const uint32_t head = head_.load(std::memory_order_relaxed);
  if (atom(indices_->tail).load(std::memory_order_seq_cst) == head) futexWait(&indices_->tail, head, timeout);
  atom(indices_->waiting).fetch_sub(1, std::memory_order_relaxed);
}

void RingConsumer::wakeAll(RingIndices* indices) { futexWake(&indices->tail); }

}  // namespace gradsync::handoff
