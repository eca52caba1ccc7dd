// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/stall_watch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

coordinator::Stall stall(const std::string& name, std::vector<int> submitted, std::vector<int> missing,
                         coordinator::Clock::duration age) {
  return coordinator::Stall{name, std::move(submitted), std::move(missing), age};
}

std::string noneHere(int) { return ""; }

TEST(StallWatchTest, WarnsOncePerStallAndAgainAfterItCleared) {
  StallWatch watch("job", seconds(300));
  auto first = watch.review({stall("w", {0}, {1}, seconds(61))}, noneHere);
  ASSERT_EQ(first.warnings.size(), 1u);
  EXPECT_TRUE(first.expired.empty());
  EXPECT_TRUE(watch.review({stall("w", {0}, {1}, seconds(90))}, noneHere).warnings.empty());
  EXPECT_TRUE(watch.review({}, noneHere).warnings.empty());  // it completed
  EXPECT_EQ(watch.review({stall("w", {0}, {1}, seconds(61))}, noneHere).warnings.size(), 1u);
  EXPECT_EQ(watch.warnings(), 2u);
}

TEST(StallWatchTest, NamesTheMissingRanksWhereTheyAre) {
  StallWatch watch("job-a", seconds(300));
  v1::NodeInfo other;
  other.set_peer_address("10.0.0.2:7000");
  other.set_hostname("node-b");
  other.add_ranks(2);
  watch.setNodes({other});
  const auto local = [](int rank) { return rank == 1 ? std::string("rank 1 (pid 42, host node-a)") : std::string(); };
  auto review = watch.review({stall("w", {0}, {1, 2, 3}, seconds(75))}, local);
  ASSERT_EQ(review.warnings.size(), 1u);
  const std::string& what = review.warnings[0];
  EXPECT_THAT(what, HasSubstr("job 'job-a': collective 'w' has waited 75 s for ranks"));
  EXPECT_THAT(what, HasSubstr("rank 1 (pid 42, host node-a)"));
  EXPECT_THAT(what, HasSubstr("rank 2 (on node 10.0.0.2:7000, host node-b)"));
  EXPECT_THAT(what, HasSubstr("rank 3 (not connected)"));
  EXPECT_THAT(what, HasSubstr("submitted it"));
}

TEST(StallWatchTest, AMissingRankThatWaitsItselfNamesWhatItWaitsFor) {
  // Rank 1 waits in 'early' for rank 3; ranks 0 and 2 went on to 'late',
  // where they wait for rank 1.
  StallWatch watch("job", seconds(5));
  auto review =
      watch.review({stall("early", {1, 2}, {3}, seconds(9)), stall("late", {0, 2}, {1}, seconds(6))}, noneHere);
  ASSERT_EQ(review.expired.size(), 2u);
  EXPECT_THAT(review.expired[1].second,
              HasSubstr("'late' has waited 6 s for ranks [1] [rank 1 (not connected)]; ranks [0, 2] submitted it; "
                        "rank 1 itself waits in 'early' for ranks [3]"));
  EXPECT_THAT(review.expired[0].second, ::testing::Not(HasSubstr("itself waits")));
}

TEST(StallWatchTest, PastTheDeadlineExpiresInsteadOfWarning) {
  StallWatch watch("job", seconds(300));
  auto review = watch.review({stall("w", {0}, {1}, seconds(300)), stall("b", {0}, {1}, seconds(100))}, noneHere);
  ASSERT_EQ(review.expired.size(), 1u);
  EXPECT_EQ(review.expired[0].first, "w");
  EXPECT_THAT(review.expired[0].second, HasSubstr("'w' has waited 300 s"));
  ASSERT_EQ(review.warnings.size(), 1u);
  EXPECT_THAT(review.warnings[0], HasSubstr("'b'"));
}

TEST(StallWatchTest, AZeroDeadlineNeverExpires) {
  StallWatch watch("job", seconds(0));
  auto review = watch.review({stall("w", {0}, {1}, seconds(100000))}, noneHere);
  EXPECT_TRUE(review.expired.empty());
  EXPECT_EQ(review.warnings.size(), 1u);
}

}  // namespace
}  // namespace gradsync::server
