// SPDX-License-Identifier: Apache-2.0
#include "handoff/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace gradsync::handoff {
namespace {

UniqueFd makeMemfd(uint64_t size, bool seal) {
  UniqueFd fd(::memfd_create("arena_test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  if (seal) {
    EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  return fd;
}

TEST(ShmArenaTest, MapsSealedMemfdAndChecksBounds) {
  auto arena = ShmArena::map(makeMemfd(4096, true), 1 << 20);
  ASSERT_TRUE(arena.isOk()) << arena.status().toString();
  EXPECT_EQ((*arena)->size(), 4096u);
  EXPECT_TRUE((*arena)->range(0, 4096).isOk());
  EXPECT_TRUE((*arena)->range(4096, 0).isOk());
  EXPECT_TRUE((*arena)->range(4000, 96).isOk());
  EXPECT_EQ((*arena)->range(4000, 97).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*arena)->range(4097, 0).status().code(), StatusCode::kOutOfRange);
  // offset + length wraps around 2^64: must still be rejected.
  EXPECT_EQ((*arena)->range(8, UINT64_MAX - 4).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*arena)->range(UINT64_MAX, 2).status().code(), StatusCode::kOutOfRange);
}

TEST(ShmArenaTest, WritesAreVisibleThroughTheFile) {
  UniqueFd fd = makeMemfd(4096, true);
  int dup_fd = ::dup(fd.get());
  auto arena = ShmArena::map(std::move(fd), 1 << 20);
  ASSERT_TRUE(arena.isOk());
  auto bytes = (*arena)->range(100, 4);
  ASSERT_TRUE(bytes.isOk());
  std::memcpy(*bytes, "abcd", 4);
  char buf[4];
  ASSERT_EQ(::pread(dup_fd, buf, 4, 100), 4);
  EXPECT_EQ(std::string(buf, 4), "abcd");
  ::close(dup_fd);
}

TEST(ShmArenaTest, RejectsUnsealedMemfd) {
  auto arena = ShmArena::map(makeMemfd(4096, false), 1 << 20);
  EXPECT_EQ(arena.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(arena.status().message().find("F_SEAL_SHRINK"), std::string::npos);
}

TEST(ShmArenaTest, RejectsOversizedAndEmptyArenas) {
  EXPECT_EQ(ShmArena::map(makeMemfd(8192, true), 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArena::map(makeMemfd(0, true), 4096).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShmArenaTest, RejectsNonMemfd) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[1]);
  EXPECT_EQ(ShmArena::map(UniqueFd(fds[0]), 4096).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradsync::handoff
