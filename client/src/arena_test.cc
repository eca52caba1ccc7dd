// SPDX-License-Identifier: Apache-2.0
#include "client/src/arena.h"

#include <fcntl.h>

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

}  // namespace
}  // namespace gradsync::client
