// SPDX-License-Identifier: Apache-2.0
// A client's shared-memory arena as the daemon sees it: a sealed memfd mapped
// once; every range the client names is bounds-checked against it.
#pragma once

#include <cstdint>
#include <memory>

#include "daemon/common/status.h"
#include "daemon/common/unique_fd.h"

namespace gradsync::handoff {

class ShmArena {
 public:
  // Maps `memfd`. The file must be sealed against shrinking (F_SEAL_SHRINK),
  // or a client could truncate it under the daemon and crash it with SIGBUS;
  // its size must be in (0, max_bytes]. Errors: INVALID_ARGUMENT.
  static StatusOr<std::unique_ptr<ShmArena>> map(UniqueFd memfd, uint64_t max_bytes);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  uint64_t size() const { return size_; }
  // The bytes [offset, offset + length), or OUT_OF_RANGE naming the range and
  // the arena size when any of it lies outside (overflow-safe).
  StatusOr<uint8_t*> range(uint64_t offset, uint64_t length) const;
  bool contains(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

 private:
  ShmArena(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint8_t* base_;
  uint64_t size_;
};

}  // namespace gradsync::handoff
