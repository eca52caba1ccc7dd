// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_formation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const Clock::time_point kCreated = Clock::time_point() + 1000s;

JobFormation formation(int size, int local_size) { return JobFormation({"j", size, local_size, 30s, "h"}, kCreated); }

// The ranks the job would name, and whether they were asked for.
struct Named {
  std::vector<int> ranks;
  int asked = 0;
  bool by_rank = false;
  JobFormation::Ranks callback() {
    return [this](bool by) {
      ++asked;
      by_rank = by;
      return ranks;
    };
  }
};

TEST(JobFormationTest, OneNodeWaitsWithinTheJoinTimeoutThenNamesTheRanksThatNeverRegistered) {
  JobFormation f = formation(2, 2);
  Named never{{1}}, missing;
  std::string cause;
  JobFormation::Facts facts;
  facts.registered = 1;
  EXPECT_EQ(f.check(facts, kCreated + 29s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kWaiting);
  EXPECT_EQ(never.asked, 0);
  ASSERT_EQ(f.check(facts, kCreated + 31s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kFailed);
  EXPECT_EQ(cause,
            "job 'j' did not form within 30 s: ranks [1] never registered with gradsyncd on host h (1 of 2 did)");
  EXPECT_TRUE(never.by_rank);
  EXPECT_EQ(missing.asked, 0);
  EXPECT_FALSE(f.formed());
}

TEST(JobFormationTest, AcrossDaemonsTheLocalRanksAreNamedByTheirLocalRank) {
  JobFormation f = formation(4, 2);
  Named never{{1}}, missing;
  std::string cause;
  JobFormation::Facts facts;
  facts.registered = 1;
  facts.across_daemons = true;
  ASSERT_EQ(f.check(facts, kCreated + 31s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kFailed);
  EXPECT_THAT(cause, HasSubstr("local ranks [1] never registered"));
  EXPECT_FALSE(never.by_rank);
}

TEST(JobFormationTest, FormedOnceEveryLocalRankAndEveryNodeIsInAndStaysFormed) {
  JobFormation f = formation(4, 2);
  Named never, missing;
  std::string cause;
  JobFormation::Facts facts;
  facts.registered = 2;
  facts.across_daemons = true;
  EXPECT_EQ(f.check(facts, kCreated + 1s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kWaiting);
  EXPECT_TRUE(f.localComplete(2));
  facts.nodes_joined = true;
  EXPECT_EQ(f.check(facts, kCreated + 2s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kFormed);
  EXPECT_TRUE(f.formed());
  // A rank that leaves later changes nothing: formed stays formed.
  facts.registered = 0;
  facts.nodes_joined = false;
  EXPECT_EQ(f.check(facts, kCreated + 100s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kFormed);
  EXPECT_TRUE(f.localComplete(0));
  EXPECT_TRUE(cause.empty());
}

TEST(JobFormationTest, AFollowerPastTheTimeoutWaitsForItsJoinAndALeaderNamesTheNodesThatNeverJoined) {
  Named never, missing{{4, 5}};
  std::string cause;
  JobFormation::Facts facts;
  facts.registered = 2;
  facts.across_daemons = true;
  facts.joins_a_leader = true;
  JobFormation follower = formation(6, 2);
  EXPECT_EQ(follower.check(facts, kCreated + 60s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kWaiting);
  facts.joins_a_leader = false;
  JobFormation leader = formation(6, 2);
  ASSERT_EQ(leader.check(facts, kCreated + 60s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kFailed);
  EXPECT_EQ(cause, "job 'j' did not form within 30 s: the nodes of ranks [4, 5] never joined the leader on host h");
  EXPECT_EQ(never.asked, 0);
}

TEST(JobFormationTest, AnElasticJobPastItsFirstEpochFormedWithRanksMissing) {
  JobFormation f = formation(4, 4);
  Named never, missing;
  std::string cause;
  JobFormation::Facts facts;
  facts.registered = 3;
  facts.elastic_past_first = true;
  EXPECT_EQ(f.check(facts, kCreated + 1s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kFormed);
  // Across daemons only once every node joined.
  JobFormation across = formation(8, 4);
  facts.across_daemons = true;
  EXPECT_EQ(across.check(facts, kCreated + 1s, never.callback(), missing.callback(), &cause),
            JobFormation::Verdict::kWaiting);
}

TEST(JobFormationTest, ThePeerSideIsClaimedOnceWhenEveryLocalRankIsHere) {
  JobFormation f = formation(4, 2);
  EXPECT_FALSE(f.claimStart(1));
  EXPECT_TRUE(f.claimStart(2));
  EXPECT_FALSE(f.claimStart(2));
}

}  // namespace
}  // namespace gradsync::server
