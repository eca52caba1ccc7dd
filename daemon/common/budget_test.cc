// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/budget.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(BudgetTest, LeasesTakeAndReturnUnits) {
  Budget budget("arena bytes", 100);
  auto a = budget.acquire(60, "rank 0");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(budget.used(), 60u);
  auto b = budget.acquire(41, "rank 1");
  ASSERT_FALSE(b.isOk());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("rank 1: needs 41 arena bytes, but 60 of the daemon's limit of 100"));
  auto c = budget.acquire(40, "rank 1");
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(budget.used(), 100u);
  { Budget::Lease gone = std::move(*a); }
  EXPECT_EQ(budget.used(), 40u);
  Budget::Lease moved;
  moved = std::move(*c);
  EXPECT_EQ(moved.units(), 40u);
  moved = Budget::Lease();
  EXPECT_EQ(budget.used(), 0u);
}

TEST(BudgetTest, HugeRequestsDoNotWrapAround) {
  Budget budget("mappings", 10);
  auto held = budget.acquire(5, "x");
  ASSERT_TRUE(held.isOk());
  EXPECT_FALSE(budget.acquire(UINT64_MAX, "x").isOk());
  EXPECT_FALSE(budget.acquire(UINT64_MAX - 2, "x").isOk());
  EXPECT_EQ(budget.used(), 5u);
}

TEST(BudgetTest, ConcurrentLeasesNeverExceedTheLimit) {
  Budget budget("units", 1000);
  std::vector<std::thread> threads;
  std::atomic<uint64_t> peak{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        auto lease = budget.acquire(7, "t");
        if (!lease.isOk()) continue;
        uint64_t seen = budget.used(), old = peak.load();
        while (seen > old && !peak.compare_exchange_weak(old, seen)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 1000u);
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace gradsync
