// SPDX-License-Identifier: Apache-2.0
// A 1 MiB arena (a sealed memfd, mapped as the daemon maps a rank's) that
// fuzz targets validate requests against; made once per process.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "handoff/shm_arena.h"

namespace gradsync::fuzz {

inline const handoff::ShmArena& fuzzArena() {
  static const std::unique_ptr<handoff::ShmArena> arena = [] {
    constexpr uint64_t kBytes = 1 << 20;
    int fd = ::memfd_create("fuzz-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ::ftruncate(fd, kBytes) != 0 || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) std::abort();
    auto mapped = handoff::ShmArena::map(UniqueFd(fd), kBytes);
    if (!mapped.isOk()) std::abort();
    return std::move(mapped).value();
  }();
  return *arena;
}

}  // namespace gradsync::fuzz
