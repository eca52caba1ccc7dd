// SPDX-License-Identifier: Apache-2.0
#include "client/src/arena.h"

#include <fcntl.h>
#include <unistd.h>

#include <set>

#include "gtest/gtest.h"

namespace gradsync::client {
namespace {

TEST(ArenaTest, AllocatesAlignedDisjointRangesAndCoalesces) {
  auto arena = Arena::create(4 << 20);
  ASSERT_TRUE(arena.isOk()) << arena.status().toString();
  Arena& a = **arena;
  auto x = a.allocate(100);
  auto y = a.allocate(1);
  auto z = a.allocate(0);
  ASSERT_TRUE(x.isOk() && y.isOk() && z.isOk());
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_GE(*x, handoff::kControlBytes);  // the rings come first
  EXPECT_EQ(*y, *x + 128);
  EXPECT_NE(*z, *y);
  EXPECT_TRUE(a.release(*y).isOk());
  EXPECT_EQ(a.release(*y).code(), StatusCode::kInvalidArgument);  // double free
  EXPECT_TRUE(a.release(*x).isOk());
  EXPECT_TRUE(a.release(*z).isOk());
  EXPECT_EQ(a.bytesInUse(), 0u);
  auto whole = a.allocate((4 << 20) - handoff::kControlBytes);  // fits only if everything coalesced back
  EXPECT_TRUE(whole.isOk()) << whole.status().toString();
  EXPECT_EQ(a.allocate(1).status().code(), StatusCode::kResourceExhausted);
}

TEST(ArenaTest, SealedAgainstResize) {
  auto arena = Arena::create(4 << 20);
  ASSERT_TRUE(arena.isOk());
  const int seals = ::fcntl((*arena)->fd(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
}

TEST(ArenaTest, ContainsChecksWholeRange) {
  auto arena = Arena::create(4 << 20);
  ASSERT_TRUE(arena.isOk());
  Arena& a = **arena;
  uint64_t offset = 0;
  EXPECT_TRUE(a.contains(a.base() + 10, 100, &offset));
  EXPECT_EQ(offset, 10u);
  EXPECT_FALSE(a.contains(a.base() + (4 << 20) - 50, 100, &offset));
  EXPECT_EQ(Arena::create(4096).status().code(), StatusCode::kInvalidArgument);
  int outside = 0;
  EXPECT_FALSE(a.contains(&outside, 4, &offset));
}

TEST(ArenaTest, LiveBlocksKeepTheirBytesAtTheirAddressesAfterTheArenaGoes) {
  auto arena = Arena::create(4 << 20);
  ASSERT_TRUE(arena.isOk());
  auto live = (*arena)->allocate(2 << 20);
  auto freed = (*arena)->allocate(4096);
  ASSERT_TRUE(live.isOk() && freed.isOk());
  uint8_t* bytes = (*arena)->base() + *live;
  for (size_t i = 0; i < (2u << 20); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE((*arena)->release(*freed).isOk());
  const int fd = ::dup((*arena)->fd());
  arena->reset();
  for (size_t i = 0; i < (2u << 20); ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 7)) << i;
  bytes[0] = 1;  // writable, and private: the memfd no longer sees this memory
  uint8_t shared = 0;
  ASSERT_EQ(::pread(fd, &shared, 1, static_cast<off_t>(*live)), 1);
  EXPECT_EQ(shared, 0);
  ::close(fd);
}

}  // namespace
}  // namespace gradsync::client
