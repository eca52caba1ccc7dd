// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/epoch_log.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(EpochLogTest, AChangeIsRecordedAndItsRecoveryTimeSetOnce) {
  EpochLog log;
  EXPECT_EQ(log.current(), 1u);
  EXPECT_EQ(log.lastCause(), "");
  const auto t0 = EpochLog::Clock::now();
  log.markEnding();
  log.enter(2, "rank 3 died", 4, 3, 7, t0);
  EXPECT_FALSE(log.ending());
  ASSERT_EQ(log.history().size(), 1u);
  const v1::EpochChange& change = log.history()[0];
  EXPECT_EQ(change.epoch(), 2u);
  EXPECT_EQ(change.size_before(), 4);
  EXPECT_EQ(change.size_after(), 3);
  EXPECT_EQ(change.failed_collectives(), 7);
  EXPECT_GT(change.unix_ms(), 0);
  EXPECT_EQ(change.recovery_ms(), 0);
  log.succeeded(1, t0 + 50ms);  // a batch of the old epoch: not the recovery
  EXPECT_EQ(log.history()[0].recovery_ms(), 0);
  log.succeeded(2, t0 + 250ms);
  log.succeeded(2, t0 + 900ms);
  EXPECT_EQ(log.history()[0].recovery_ms(), 250);
}

TEST(EpochLogTest, BelowTheMinimumTheWaitCountsFromItsFirstMoment) {
  EpochLog log;
  const auto t0 = EpochLog::Clock::now();
  log.enter(2, "rank 1 died", 3, 2, 0, t0);
  EXPECT_FALSE(log.belowMinimum());
  EXPECT_FALSE(log.belowMinimumFor(0s, t0));
  log.waitBelowMinimum(t0);
  log.waitBelowMinimum(t0 + 5s);  // keeps the first
  EXPECT_TRUE(log.belowMinimumFor(10s, t0 + 10s));
  EXPECT_FALSE(log.belowMinimumFor(10s, t0 + 9s));
  EXPECT_EQ(log.belowMinimumFailure(3, 2, t0 + 12s),
            "the elastic job stayed below its minimum of 3 ranks for 12 s (2 ranks, no new rank came; last change: "
            "rank 1 died)");
  log.grew(1, 3);
  EXPECT_EQ(log.history().back().size_after(), 3);
  EXPECT_THAT(log.lastCause(), HasSubstr("rank 1 died; then admitted 1 new ranks"));
  log.filled();
  EXPECT_FALSE(log.belowMinimum());
}

TEST(EpochLogTest, CommitsAreCounted) {
  EpochLog log;
  log.countCommit();
  log.countCommit();
  EXPECT_EQ(log.commits(), 2u);
}

}  // namespace
}  // namespace gradsync::server
