// SPDX-License-Identifier: Apache-2.0
// A client's shared-memory arena as the daemon sees it: a sealed memfd mapped
// once; every range the client names is bounds-checked against it.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "base/unique_fd.h"

namespace gradsync::handoff {

class ShmArena {
 public:
  // Maps `memfd`. The file must be sealed against shrinking (F_SEAL_SHRINK),
  // or a client could truncate it under the daemon and crash it with SIGBUS;
  // its size must be in (0, max_bytes]. Errors: INVALID_ARGUMENT.
  //
  // `color` staggers the mapping's address by color * 68 KiB (mod 16): ranks
  // place tensors at equal offsets of equally sized arenas, and streams whose
  // addresses differ by a multiple of 256 MiB run 3-4x slower on Zen 3
  // (measured: 27.5 vs 7.2 ms for a 64 MiB float32 sum); staggering avoids it.
  static StatusOr<std::unique_ptr<ShmArena>> map(UniqueFd memfd, uint64_t max_bytes, uint32_t color = 0);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  uint64_t size() const { return size_; }
  // The bytes [offset, offset + length), or OUT_OF_RANGE naming the range and
  // the arena size when any of it lies outside (overflow-safe).
  StatusOr<uint8_t*> range(uint64_t offset, uint64_t length) const;
  bool contains(uint64_t offset, uint64_t length) const { return offset <= size_ && length <= size_ - offset; }

 private:
  ShmArena(uint8_t* base, uint64_t size, void* reservation, uint64_t reservation_size)
      : base_(base), size_(size), reservation_(reservation), reservation_size_(reservation_size) {}
  uint8_t* base_;
  uint64_t size_;
  void* reservation_;  // the address range reserved around the mapping
  uint64_t reservation_size_;
};

}  // namespace gradsync::handoff
