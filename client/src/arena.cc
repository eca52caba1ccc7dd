// SPDX-License-Identifier: Apache-2.0
#include "client/src/arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gradsync::client {
namespace {

constexpr uint64_t kAlign = 64;

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

StatusOr<std::unique_ptr<Arena>> Arena::create(uint64_t bytes) {
  bytes = (bytes + 4095) & ~uint64_t{4095};
  if (bytes < 2 * handoff::kControlBytes) {
    return invalidArgument("arena of " + std::to_string(bytes) + " bytes is too small (at least " +
                           std::to_string(2 * handoff::kControlBytes) + ")");
  }
  UniqueFd fd(::memfd_create("gradsync-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return resourceExhausted(errnoText("memfd_create"));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) return resourceExhausted(errnoText("ftruncate arena"));
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return internalError(errnoText("seal arena"));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd.get(), 0);
  if (base == MAP_FAILED) return resourceExhausted(errnoText("mmap arena"));
  // Huge pages cut TLB misses on large tensors (a large effect in VMs). Takes
  // effect where the kernel allows THP for shared memory
  // (/sys/kernel/mm/transparent_hugepage/shmem_enabled = advise or always).
  ::madvise(base, bytes, MADV_HUGEPAGE);
  return std::unique_ptr<Arena>(new Arena(std::move(fd), static_cast<uint8_t*>(base), bytes));
}

Arena::Arena(UniqueFd fd, uint8_t* base, uint64_t size) : fd_(std::move(fd)), base_(base), size_(size) {
  control()->magic = handoff::kRingMagic;
  control()->version = 1;
  free_[handoff::kControlBytes] = size - handoff::kControlBytes;
}

Arena::~Arena() {
  MutexLock lock(mutex_);  // (no other thread holds it any more)
  if (allocated_.empty()) {
    ::munmap(base_, size_);
  } else {
    moveLiveBlocksToPrivateMemory();
  }
}

void Arena::moveLiveBlocksToPrivateMemory() {
  // Private anonymous memory with the live blocks' bytes, moved over the
  // shared mapping in one step (mremap): pointers into the arena stay valid,
  // the memfd's pages go back once the daemon unmaps too, and only the live
  // blocks' pages are ever touched here. Where that fails, the shared
  // mapping stays: a leak rather than pointers into unmapped memory.
  void* copy = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (copy == MAP_FAILED) return;
  for (const auto& [offset, length] : allocated_)
    std::memcpy(static_cast<uint8_t*>(copy) + offset, base_ + offset, length);
  if (::mremap(copy, size_, size_, MREMAP_MAYMOVE | MREMAP_FIXED, base_) == MAP_FAILED) ::munmap(copy, size_);
}

StatusOr<uint64_t> Arena::allocate(uint64_t bytes) {
  const uint64_t want = bytes == 0 ? kAlign : (bytes + kAlign - 1) & ~(kAlign - 1);
  if (want < bytes) return resourceExhausted("allocation too large");
  MutexLock lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - want;
    free_.erase(it);
    if (rest > 0) free_[offset + want] = rest;
    allocated_[offset] = want;
    return offset;
  }
  return resourceExhausted("arena of " + std::to_string(size_) + " bytes cannot fit " + std::to_string(bytes) +
                           " more bytes (" + std::to_string(size_ - bytesInUseLocked()) +
                           " free, fragmented); raise GRADSYNC_ARENA_BYTES");
}

Status Arena::release(uint64_t offset) {
  MutexLock lock(mutex_);
  auto it = allocated_.find(offset);
  if (it == allocated_.end()) return invalidArgument("arena offset " + std::to_string(offset) + " is not allocated");
  uint64_t start = offset;
  uint64_t length = it->second;
  allocated_.erase(it);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = length;
  return okStatus();
}

bool Arena::contains(const void* ptr, uint64_t bytes, uint64_t* offset) const {
  const auto* p = static_cast<const uint8_t*>(ptr);
  if (p < base_ || p > base_ + size_) return false;
  const uint64_t off = static_cast<uint64_t>(p - base_);
  if (bytes > size_ - off) return false;
  *offset = off;
  return true;
}

uint64_t Arena::bytesInUseLocked() const {
  uint64_t used = 0;
  for (const auto& [offset, length] : allocated_) used += length;
  return used;
}

uint64_t Arena::bytesInUse() const {
  MutexLock lock(mutex_);
  return bytesInUseLocked();
}

}  // namespace gradsync::client
