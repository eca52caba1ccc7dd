// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_negotiation.h"
#include "daemon/coordinator/test_requests.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using coordinator::Clock;
using coordinator::Request;
using coordinator::Response;
using std::chrono::seconds;
using ::testing::HasSubstr;

using coordinator::testing::allreduce;

Request addSet(int rank, std::vector<int> ranks) {
  Request r;
  r.rank = rank;
  r.handle = 500 + rank;
  r.name = "add";
  r.type = v1::PROCESS_SET_ADD;
  r.set_ranks = std::move(ranks);
  return r;
}

std::string noneHere(int) { return ""; }

// Every rank of a 3-rank job submits `make(rank)`; what became ready.
template <typename Make>
std::vector<Response> everyRank(JobNegotiation& negotiation, Make make, Clock::time_point now) {
  std::vector<Response> ready;
  for (int rank = 0; rank < 3; ++rank) {
    auto got = negotiation.submit(make(rank), now);
    EXPECT_TRUE(got.isOk()) << got.status().toString();
    if (got.isOk()) {
      for (auto& r : *got) ready.push_back(std::move(r));
    }
  }
  return ready;
}

TEST(JobNegotiationTest, AProcessSetIsPublishedOnlyWhenTheJobPublishesIt) {
  JobNegotiation negotiation("job", 3, {{0, 2}}, seconds(300));
  const auto before = negotiation.processSets();
  EXPECT_TRUE(before->contains(1));
  const auto ready = everyRank(
      negotiation,
      [](int rank) {
        return addSet(rank, {1, 2});
      },
      Clock::now());
  ASSERT_EQ(ready.size(), 1u);
  ASSERT_TRUE(ready[0].status.isOk()) << ready[0].status.toString();
  // Negotiated, not yet published: enqueue checks still see the old sets
  // (the job publishes before it queues the response).
  EXPECT_FALSE(negotiation.processSets()->contains(2));
  negotiation.publish(ready, /*from_leader=*/false);
  EXPECT_TRUE(negotiation.processSets()->contains(2));
  EXPECT_FALSE(before->contains(2));  // a reader's copy never changes under it
  v1::JobInfo info;
  negotiation.describeProcessSets(&info);
  ASSERT_EQ(info.process_sets_size(), 2);
  EXPECT_EQ(info.process_sets(1).id(), 2);
}

TEST(JobNegotiationTest, AFollowerAppliesTheLeadersChangeAndSkipsOneThatDoesNotApply) {
  JobNegotiation leader("job", 3, {}, seconds(300));
  auto ready = everyRank(
      leader,
      [](int rank) {
        return addSet(rank, {0, 1});
      },
      Clock::now());
  ASSERT_EQ(ready.size(), 1u);
  JobNegotiation follower("job", 3, {}, seconds(300));
  follower.publish(ready, /*from_leader=*/true);
  EXPECT_TRUE(follower.processSets()->contains(ready[0].changed_process_set));
  // The same id again does not apply: logged and skipped, nothing changes.
  const auto sets = follower.processSets();
  follower.publish(ready, /*from_leader=*/true);
  EXPECT_EQ(follower.processSets(), sets);
}

TEST(JobNegotiationTest, ResizeLeavesOnlyTheGlobalSetAndNothingPending) {
  JobNegotiation negotiation("job", 4, {{0, 1}}, seconds(300));
  ASSERT_TRUE(negotiation.submit(allreduce(0, "w"), Clock::now()).isOk());
  EXPECT_EQ(negotiation.pendingCount(), 1u);
  negotiation.resize(2);
  EXPECT_EQ(negotiation.size(), 2);
  EXPECT_EQ(negotiation.pendingCount(), 0u);
  EXPECT_EQ(negotiation.processSets()->count(), 1u);
  // Ranks of the old size are refused now.
  EXPECT_FALSE(negotiation.submit(allreduce(3, "w"), Clock::now()).isOk());
}

TEST(JobNegotiationTest, AStallIsWarnedOnceAndFailedPastTheDeadlineWithItsRequests) {
  JobNegotiation negotiation("job", 3, {}, seconds(10));
  const auto start = Clock::now();
  ASSERT_TRUE(negotiation.submit(allreduce(0, "w"), start).isOk());
  ASSERT_TRUE(negotiation.submit(allreduce(2, "w"), start).isOk());
  EXPECT_TRUE(negotiation.checkStalls(start + seconds(6), seconds(5), noneHere, std::nullopt).empty());
  EXPECT_EQ(negotiation.stallWarnings(), 1u);
  EXPECT_TRUE(negotiation.checkStalls(start + seconds(7), seconds(5), noneHere, std::nullopt).empty());
  EXPECT_EQ(negotiation.stallWarnings(), 1u);  // once per stall
  v1::JobTensors tensors;
  negotiation.describe(start + seconds(7), &tensors);
  ASSERT_EQ(tensors.negotiating_size(), 1);
  EXPECT_EQ(tensors.negotiating(0).missing_ranks_size(), 1);
  EXPECT_EQ(tensors.negotiating(0).missing_ranks(0), 1);

  const auto expired = negotiation.checkStalls(start + seconds(11), seconds(5), noneHere, std::nullopt);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_THAT(expired[0].what, HasSubstr("'w'"));
  ASSERT_EQ(expired[0].requests.size(), 2u);  // the requests of ranks 0 and 2, taken out
  EXPECT_EQ(negotiation.pendingCount(), 0u);
}

TEST(JobNegotiationTest, TheNodesOfAnEpochNameWhereAMissingRankIs) {
  JobNegotiation negotiation("job", 3, {}, seconds(0));
  const auto start = Clock::now();
  ASSERT_TRUE(negotiation.submit(allreduce(0, "w"), start).isOk());
  v1::NodeInfo other;
  other.set_peer_address("10.0.0.2:7000");
  other.set_hostname("node-b");
  other.add_ranks(1);
  other.add_ranks(2);
  // Deadline zero: never failed, however long it waits.
  EXPECT_TRUE(
      negotiation.checkStalls(start + seconds(3600), seconds(5), noneHere, std::vector<v1::NodeInfo>{other}).empty());
  EXPECT_EQ(negotiation.stallWarnings(), 1u);
}

TEST(JobNegotiationTest, SizeAndSetsAreReadWithoutALockWhileTheyChange) {
  JobNegotiation negotiation("job", 8, {}, seconds(300));
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const int size = negotiation.size();
      const auto sets = negotiation.processSets();
      EXPECT_TRUE(size == 8 || size == 4) << size;
      EXPECT_GE(sets->find(0)->size(), 4u);
    }
  });
  for (int i = 0; i < 1000; ++i) negotiation.resize(i % 2 == 0 ? 4 : 8);
  done.store(true);
  reader.join();
}

}  // namespace
}  // namespace gradsync::server
