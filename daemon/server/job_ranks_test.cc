// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_ranks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::shared_ptr<Session> session(uint64_t id, int rank, int local_rank = 0) {
  return std::make_shared<Session>(id, SessionSecret{},
                                   RankIdentity{"j", rank, 4, local_rank, 2, "host-a", "test", false});
}

std::vector<int> ranksOf(const JobRanks& ranks) {
  std::vector<int> out;
  for (const auto& [rank, s] : ranks.byRank()) out.push_back(rank);
  return out;
}

TEST(JobRanksTest, ARankIsTakenOnceAndTheSecondIsToldByWhom) {
  JobRanks ranks("j");
  ASSERT_TRUE(ranks.add(session(1, 2, 0)).isOk());
  const Status again = ranks.add(session(2, 2, 1));
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), HasSubstr("job 'j': rank 2 is already connected as rank 2 (pid unknown, host host-a)"));
  EXPECT_EQ(ranks.count(), 1);
}

TEST(JobRanksTest, ALeavingRankStaysRegisteredHereAndMissingOnesAreNamed) {
  JobRanks ranks("j");
  auto a = session(1, 2, 0);
  ASSERT_TRUE(ranks.add(a).isOk());
  EXPECT_THAT(ranks.neverRegistered(2, /*by_rank=*/false), ElementsAre(1));  // local rank 1 never came
  EXPECT_THAT(ranks.neverRegistered(4, /*by_rank=*/true), ElementsAre(0, 1, 3));
  EXPECT_EQ(ranks.remove(*session(9, 2)), JobRanks::Left::kUnknown);  // another session of that rank
  EXPECT_EQ(ranks.remove(*a), JobRanks::Left::kRank);
  EXPECT_TRUE(ranks.empty());
  EXPECT_EQ(ranks.find(2), nullptr);
  EXPECT_TRUE(ranks.registeredHere(2));
}

TEST(JobRanksTest, OnlyJoinersWithAnOpenStreamAreAdmittedAfterTheRanks) {
  JobRanks ranks("j");
  ASSERT_TRUE(ranks.add(session(1, 0)).isOk());
  ASSERT_TRUE(ranks.add(session(2, 3)).isOk());
  auto joiner = session(3, -1);
  ranks.addJoiner(joiner);
  EXPECT_EQ(ranks.joinerCount(), 1u);
  EXPECT_EQ(ranks.readyJoinerCount(), 0u);  // no stream: nobody could tell it its place
  EXPECT_EQ(ranks.admitReadyJoiners(), 0);
  EXPECT_TRUE(ranks.unreportedJoiners(0).empty());
  EXPECT_EQ(ranks.remove(*joiner), JobRanks::Left::kJoiner);
  EXPECT_FALSE(ranks.empty());
}

TEST(JobRanksTest, ANewEpochRenumbersSurvivorsInOrderAndRefusesTheRest) {
  JobRanks ranks("j");
  auto r0 = session(1, 0), r2 = session(2, 2), r3 = session(3, 3);
  for (const auto& s : {r0, r2, r3}) ASSERT_TRUE(ranks.add(s).isOk());
  auto admitted = session(4, -1);
  // Ranks 0 and 3 survive (new 0 and 1); rank 2 is left out; a joiner of
  // this node becomes rank 2.
  auto refused = ranks.renumber(5, {0, 3}, {{2, admitted}}, "lost rank 1");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].first, r2);
  EXPECT_TRUE(refused[0].second.membership_change().refused());
  EXPECT_THAT(refused[0].second.membership_change().cause(),
              HasSubstr("job 'j' left rank 2 (pid unknown, host host-a) out of epoch 5: lost rank 1"));
  EXPECT_THAT(ranksOf(ranks), ElementsAre(0, 1, 2));
  EXPECT_EQ(r3->rank(), 1);
  EXPECT_EQ(admitted->rank(), 2);
  EXPECT_THAT(ranks.registered(), ElementsAre(0, 1, 2));

  auto places = ranks.places(5, 6, "lost rank 1");
  ASSERT_EQ(places.size(), 3u);
  const auto& last = places[2].second.membership_change();
  EXPECT_EQ(places[2].first, admitted);
  EXPECT_EQ(last.epoch(), 5u);
  EXPECT_EQ(last.rank(), 2);
  EXPECT_EQ(last.size(), 6);
  EXPECT_EQ(last.local_rank(), 2);
  EXPECT_EQ(last.local_size(), 3);
  EXPECT_FALSE(last.refused());

  auto refusals = ranks.refuseRanks("the job failed");
  ASSERT_EQ(refusals.size(), 3u);
  EXPECT_EQ(refusals[0].second.membership_change().cause(), "job 'j': the job failed");
}

TEST(JobRanksTest, RefusedJoinersAreNoLongerWaiting) {
  JobRanks ranks("j");
  ranks.addJoiner(session(1, -1));
  ranks.addJoiner(session(2, -1));
  EXPECT_EQ(ranks.takeJoiner(2)->id(), 2u);
  EXPECT_EQ(ranks.takeJoiner(2), nullptr);
  auto refused = ranks.refuseJoiners("the job failed");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].second.membership_change().cause(), "job 'j' takes no new rank: the job failed");
  EXPECT_EQ(ranks.joinerCount(), 0u);
  EXPECT_TRUE(ranks.empty());
}

}  // namespace
}  // namespace gradsync::server
