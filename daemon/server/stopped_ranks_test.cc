// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/stopped_ranks.h"

#include <gtest/gtest.h>

namespace gradsync::server {
namespace {

using std::chrono::seconds;
using Ids = std::vector<uint64_t>;

TEST(StoppedRanksTest, ARankCountsFromTheFirstReviewThatSawItStopped) {
  StoppedRanks ranks(seconds(6));
  const auto start = coordinator::Clock::now();
  EXPECT_EQ(ranks.review({7}, start), Ids{});
  EXPECT_EQ(ranks.review({7, 8}, start + seconds(5)), Ids{});
  EXPECT_EQ(ranks.review({7, 8}, start + seconds(6)), Ids{7});
  EXPECT_EQ(ranks.review({7, 8}, start + seconds(11)), (Ids{7, 8}));
}

TEST(StoppedRanksTest, ARankSeenRunningAgainStartsOver) {
  StoppedRanks ranks(seconds(6));
  const auto start = coordinator::Clock::now();
  EXPECT_EQ(ranks.review({7}, start), Ids{});
  EXPECT_EQ(ranks.review({}, start + seconds(3)), Ids{});  // continued
  EXPECT_EQ(ranks.review({7}, start + seconds(7)), Ids{});
  EXPECT_EQ(ranks.review({7}, start + seconds(12)), Ids{});
  EXPECT_EQ(ranks.review({7}, start + seconds(13)), Ids{7});
}

}  // namespace
}  // namespace gradsync::server
