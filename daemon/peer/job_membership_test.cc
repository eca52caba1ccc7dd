// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/job_membership.h"

#include <gtest/gtest.h>

#include <thread>

#include "gmock/gmock.h"

namespace gradsync::peer {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

v1::NodeInfo node(const std::string& address, std::vector<int> ranks, int cross_rank, bool nccl = true) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  n.set_cross_rank(cross_rank);
  n.set_gpus(nccl ? 1 : 0);
  n.set_nccl(nccl);
  n.set_steady_state_rounds(true);
  for (int r : ranks) n.add_ranks(r);
  return n;
}

struct Recorded {
  std::vector<std::string> ended;  // what end_transfers was told
  int ids_made = 0;
};

JobMembership membershipOf(const std::string& self, Recorded* recorded, bool make_ids = true) {
  JobMembership::MakeNcclId make;
  if (make_ids) {
    make = [recorded]() -> StatusOr<std::string> { return "id-" + std::to_string(++recorded->ids_made); };
  }
  return JobMembership("j", self, 0, make, [recorded](const std::string& why) { recorded->ended.push_back(why); });
}

TEST(JobMembershipTest, AWaitForTheJobEndsWhenItFormsStopsOrItsTransfersEnd) {
  Recorded recorded;
  JobMembership formed = membershipOf("b:1", &recorded);
  EXPECT_FALSE(formed.waitFormed(CrossClock::now() + milliseconds(10)));  // the deadline
  std::thread joiner([&] {
    std::this_thread::sleep_for(milliseconds(50));
    formed.joined({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 0, "leader-id");
  });
  EXPECT_TRUE(formed.waitFormed(CrossClock::now() + std::chrono::seconds(10)));
  joiner.join();
  EXPECT_EQ(formed.epoch(), 1u);  // a join at epoch 0 counts as the first
  EXPECT_EQ(formed.memberCount(), 2u);

  JobMembership ended = membershipOf("b:1", &recorded);
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ended.endTransfers("node c lost");
  });
  const auto start = CrossClock::now();
  EXPECT_FALSE(ended.waitFormed(start + std::chrono::seconds(10)));
  EXPECT_LT(CrossClock::now() - start, std::chrono::seconds(5));
  stopper.join();
  EXPECT_EQ(ended.ended(), "node c lost");
  EXPECT_EQ(recorded.ended, std::vector<std::string>{"node c lost"});
}

TEST(JobMembershipTest, AnEpochRunsUntilTheJobMovesOnStopsOrEndsItsTransfers) {
  Recorded recorded;
  JobMembership members = membershipOf("a:1", &recorded);
  members.joined({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 1, "");
  EXPECT_TRUE(members.epochRuns(1).isOk());
  EXPECT_EQ(members.epochRuns(2).code(), StatusCode::kAborted);
  EXPECT_THAT(members.epochRuns(2).message(), HasSubstr("epoch 2 is over, the job is at epoch 1"));
  members.endTransfers("first");
  members.endTransfers("second");
  EXPECT_THAT(members.epochRuns(1).message(), HasSubstr("first"));  // the first reason stays
  EXPECT_EQ(recorded.ended.size(), 2u);                             // the transfers end both times
  members.stop();
  EXPECT_EQ(members.epochRuns(1).code(), StatusCode::kCancelled);
  EXPECT_EQ(members.ended(), "stopped");
}

TEST(JobMembershipTest, TheNcclIdIsMadeOnlyWhenEveryMemberHasNccl) {
  Recorded recorded;
  JobMembership members = membershipOf("a:1", &recorded);
  {
    MutexLock lock(members.mutex());
    members.bookLocked().form({node("a:1", {0}, 0), node("b:1", {1}, 1, /*nccl=*/false)}, 1);
    members.makeNcclIdLocked();
    EXPECT_TRUE(members.ncclIdLocked().empty());
    members.bookLocked().form({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 1);
    members.makeNcclIdLocked();
    EXPECT_EQ(members.ncclIdLocked(), "id-1");
  }
  EXPECT_EQ(recorded.ids_made, 1);
}

TEST(JobMembershipTest, AnOldEpochsTransfersEndUnlessTheJobsEndEndedThemFirst) {
  Recorded recorded;
  JobMembership members = membershipOf("a:1", &recorded);
  members.joined({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 3, "");
  {
    MutexLock lock(members.mutex());
    members.endOldEpochTransfersLocked();
  }
  ASSERT_EQ(recorded.ended.size(), 1u);
  EXPECT_EQ(recorded.ended[0], "the job moved to epoch 3");
  members.endTransfers("node b lost");
  {
    MutexLock lock(members.mutex());
    members.endOldEpochTransfersLocked();  // keeps the job's reason
  }
  EXPECT_EQ(recorded.ended.size(), 2u);
}

TEST(JobMembershipTest, AnAbortNoticeComesOnlyFromANodeOfTheJobAndItsEpoch) {
  Recorded recorded;
  JobMembership fixed = membershipOf("a:1", &recorded);
  // While it forms, a node that joined after this one may not be known yet.
  EXPECT_TRUE(fixed.checkAbortNotice("z:1", 0, /*elastic=*/false, "why").isOk());
  fixed.joined({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 1, "");
  EXPECT_TRUE(fixed.checkAbortNotice("b:1", 0, false, "why").isOk());
  EXPECT_EQ(fixed.checkAbortNotice("z:1", 0, false, "why").code(), StatusCode::kPermissionDenied);

  JobMembership elastic = membershipOf("a:1", &recorded);
  elastic.joined({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 2, "");
  EXPECT_TRUE(elastic.checkAbortNotice("b:1", 2, /*elastic=*/true, "why").isOk());
  const Status stale = elastic.checkAbortNotice("b:1", 1, true, "why");
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("is at epoch 2 without b:1: its notice is stale"));
}

TEST(JobMembershipTest, EveryMemberOffersOnlyOnceFormed) {
  Recorded recorded;
  JobMembership members = membershipOf("a:1", &recorded);
  EXPECT_FALSE(members.everyMemberOffers(&v1::NodeInfo::steady_state_rounds));
  members.joined({node("a:1", {0}, 0), node("b:1", {1}, 1)}, 1, "");
  EXPECT_TRUE(members.everyMemberOffers(&v1::NodeInfo::steady_state_rounds));
  EXPECT_FALSE(members.everyMemberOffers(&v1::NodeInfo::leader_rounds));
  EXPECT_TRUE(members.isMember("b:1"));
  EXPECT_FALSE(members.isMember("c:1"));
}

}  // namespace
}  // namespace gradsync::peer
