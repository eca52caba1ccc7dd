// SPDX-License-Identifier: Apache-2.0
// The client's shared-memory arena: a sealed memfd mapped here and in the
// daemon, with a first-fit allocator over it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "handoff/shm_layout.h"

namespace gradsync::client {

class Arena {
 public:
  // Creates and maps a memfd of `bytes`, sealed against resizing. The first
  // handoff::kControlBytes hold the doorbell rings (shm_layout.h); tensors
  // are allocated after them.
  static StatusOr<std::unique_ptr<Arena>> create(uint64_t bytes);
  ~Arena();
  // Unmaps the arena, except where blocks are still allocated: those keep
  // their bytes, at the same addresses, in private memory (never freed).
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  uint8_t* base() const { return base_; }
  handoff::ArenaControl* control() const { return reinterpret_cast<handoff::ArenaControl*>(base_); }

  // Reserves `bytes` (rounded up to 64), returning the offset, or
  // RESOURCE_EXHAUSTED. Zero bytes get a valid offset of an empty range.
  StatusOr<uint64_t> allocate(uint64_t bytes);
  // Frees an offset returned by allocate. INVALID_ARGUMENT when unknown.
  Status release(uint64_t offset);
  // Whether [ptr, ptr + bytes) lies inside the arena; its offset if so.
  bool contains(const void* ptr, uint64_t bytes, uint64_t* offset) const;
  uint64_t bytesInUse() const;

 private:
  Arena(UniqueFd fd, uint8_t* base, uint64_t size);
  uint64_t bytesInUseLocked() const GS_REQUIRES(mutex_);
  void moveLiveBlocksToPrivateMemory() GS_REQUIRES(mutex_);

  UniqueFd fd_;
  uint8_t* base_;
  uint64_t size_;
  mutable Mutex mutex_;
  std::map<uint64_t, uint64_t> free_ GS_GUARDED_BY(mutex_);       // offset -> length
  std::map<uint64_t, uint64_t> allocated_ GS_GUARDED_BY(mutex_);  // offset -> length
};

}  // namespace gradsync::client
