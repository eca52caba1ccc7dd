// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/journal.h"
#include "daemon/common/log_limit.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using std::chrono::milliseconds;

TEST(LogSite, TheSameMessageAtMostOnceASecondWithTheCountHeldBack) {
  LogSite site;
  const auto t0 = LogSite::Clock::now();
  uint64_t dropped = 99;
  EXPECT_TRUE(site.admit("peer lost", t0, &dropped));
  EXPECT_EQ(dropped, 0u);
  EXPECT_FALSE(site.admit("peer lost", t0 + milliseconds(10), &dropped));
  EXPECT_FALSE(site.admit("peer lost", t0 + milliseconds(999), &dropped));
  EXPECT_TRUE(site.admit("another message", t0 + milliseconds(20), &dropped)) << "other messages pass";
  EXPECT_TRUE(site.admit("peer lost", t0 + milliseconds(1000), &dropped));
  EXPECT_EQ(dropped, 2u);
  EXPECT_FALSE(site.admit("peer lost", t0 + milliseconds(1500), &dropped));
}

TEST(LogSite, ManyDifferentMessagesStayBounded) {
  LogSite site;
  const auto t0 = LogSite::Clock::now();
  uint64_t dropped = 0;
  for (int i = 0; i < 10000; ++i) {
    EXPECT_TRUE(site.admit("rank " + std::to_string(i) + " registered", t0 + milliseconds(2 * i), &dropped));
  }
}

TEST(Journal, JobAndRankFieldsComeFromTheMessage) {
  LogFields f = fieldsOf("job 'train-7': rank 3 (pid 42) lost: connection reset");
  EXPECT_EQ(f.job, "train-7");
  EXPECT_EQ(f.rank, "3");
  f = fieldsOf("stall: job 'a b' collective 'x' waited 60 s for ranks [2]");
  EXPECT_EQ(f.job, "a b");
  EXPECT_EQ(f.rank, "");
  f = fieldsOf("local rank 5 is not a rank of anything; framerank 9");
  EXPECT_EQ(f.job, "");
  EXPECT_EQ(f.rank, "5");
  f = fieldsOf("job 'unterminated");
  EXPECT_EQ(f.job, "");
}

}  // namespace
}  // namespace gradsync
