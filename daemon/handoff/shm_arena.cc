// SPDX-License-Identifier: Apache-2.0
#include "daemon/handoff/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gradsync::handoff {

StatusOr<std::unique_ptr<ShmArena>> ShmArena::map(UniqueFd memfd, uint64_t max_bytes) {
  int seals = ::fcntl(memfd.get(), F_GET_SEALS);
  if (seals < 0) return invalidArgument("arena is not a sealable memfd (F_GET_SEALS failed)");
  if (!(seals & F_SEAL_SHRINK)) return invalidArgument("arena memfd is not sealed against shrinking (F_SEAL_SHRINK)");
  struct stat st {};
  if (::fstat(memfd.get(), &st) != 0) return invalidArgument(std::string("fstat arena: ") + std::strerror(errno));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0 || size > max_bytes) {
    return invalidArgument("arena of " + std::to_string(size) + " bytes (allowed: 1.." + std::to_string(max_bytes) + ")");
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (base == MAP_FAILED) return invalidArgument(std::string("mmap arena: ") + std::strerror(errno));
  return std::unique_ptr<ShmArena>(new ShmArena(static_cast<uint8_t*>(base), size));
}

ShmArena::~ShmArena() { ::munmap(base_, size_); }

StatusOr<uint8_t*> ShmArena::range(uint64_t offset, uint64_t length) const {
  if (!contains(offset, length)) {
    return outOfRange("range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                      ") lies outside the arena of " + std::to_string(size_) + " bytes");
  }
  return base_ + offset;
}

}  // namespace gradsync::handoff
