// SPDX-License-Identifier: Apache-2.0
#include "handoff/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gradsync::handoff {

namespace {
constexpr uint64_t kColorStep = 68 << 10;  // 17 pages
constexpr uint32_t kColors = 16;
}  // namespace

StatusOr<std::unique_ptr<ShmArena>> ShmArena::map(UniqueFd memfd, uint64_t max_bytes, uint32_t color) {
  int seals = ::fcntl(memfd.get(), F_GET_SEALS);
  if (seals < 0) return invalidArgument("arena is not a sealable memfd (F_GET_SEALS failed)");
  if (!(seals & F_SEAL_SHRINK)) return invalidArgument("arena memfd is not sealed against shrinking (F_SEAL_SHRINK)");
  struct stat st {};
  if (::fstat(memfd.get(), &st) != 0) return invalidArgument(std::string("fstat arena: ") + std::strerror(errno));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0 || size > max_bytes) {
    return invalidArgument("arena of " + std::to_string(size) + " bytes (allowed: 1.." + std::to_string(max_bytes) +
                           ")");
  }
  const uint64_t reservation_size = size + kColorStep * kColors;
  void* reservation = ::mmap(nullptr, reservation_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reservation == MAP_FAILED) return invalidArgument(std::string("reserve arena: ") + std::strerror(errno));
  uint8_t* wanted = static_cast<uint8_t*>(reservation) + kColorStep * (color % kColors);
  void* base = ::mmap(wanted, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd.get(), 0);
  if (base == MAP_FAILED) {
    ::munmap(reservation, reservation_size);
    return invalidArgument(std::string("mmap arena: ") + std::strerror(errno));
  }
  ::madvise(base, size, MADV_HUGEPAGE);  // see client/src/arena.cc
  return std::unique_ptr<ShmArena>(new ShmArena(static_cast<uint8_t*>(base), size, reservation, reservation_size));
}

// Unmapping the reservation also unmaps the arena mapped inside it.
ShmArena::~ShmArena() { ::munmap(reservation_, reservation_size_); }

StatusOr<uint8_t*> ShmArena::range(uint64_t offset, uint64_t length) const {
  if (!contains(offset, length)) {
    return outOfRange("range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                      ") lies outside the arena of " + std::to_string(size_) + " bytes");
  }
  return base_ + offset;
}

}  // namespace gradsync::handoff
