// SPDX-License-Identifier: Apache-2.0
// A job's endpoints before any UCX transfer: what a ring or mesh waits for
// and refuses, from the membership alone.
#include "daemon/peer/job_endpoints.h"

#include <gtest/gtest.h>

#include <thread>

#include "daemon/peer/test_node_side.h"
#include "gmock/gmock.h"

namespace gradsync::peer {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

v1::NodeInfo node(const std::string& address, int cross_rank) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  n.set_ucx_address("ucx-" + address);
  n.set_cross_rank(cross_rank);
  n.add_ranks(cross_rank);
  return n;
}

class JobEndpointsTest : public ::testing::Test {
 protected:
  StatusOr<std::optional<collective::RingContext>> ring(uint64_t epoch, std::vector<int> nodes, milliseconds wait) {
    return endpoints_.ring(collective::TransferId{}, CrossClock::now() + wait, epoch, nodes);
  }
  testing::QuietSide side_;
  JobMembership membership_{"j", "b:1", 0, nullptr, [this](const std::string& why) { endpoints_.abort(why); }};
  JobEndpoints endpoints_{"j", "token", "b:1", &membership_, [this]() -> const NodeSide& { return side_; }};
};

TEST_F(JobEndpointsTest, ARingWaitsForTheMembershipUntilItsDeadline) {
  const auto never = ring(1, {}, milliseconds(20));
  EXPECT_EQ(never.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(never.status().message(), HasSubstr("never formed a ring"));

  std::thread joiner([&] {
    std::this_thread::sleep_for(milliseconds(50));
    membership_.joined({node("a:1", 0), node("b:1", 1), node("c:1", 2)}, 1, "");
  });
  // Formed meanwhile: a ring of nodes 0 and 2 does not hold this node.
  const auto without = ring(1, {0, 2}, milliseconds(10000));
  joiner.join();
  ASSERT_TRUE(without.isOk()) << without.status().message();
  EXPECT_FALSE(without->has_value());
}

TEST_F(JobEndpointsTest, ARingOfAnEpochThatIsOverOrOfAnEndedJobIsRefused) {
  membership_.joined({node("a:1", 0), node("b:1", 1)}, 2, "nccl");
  EXPECT_EQ(ring(1, {}, milliseconds(10)).status().code(), StatusCode::kAborted);
  EXPECT_TRUE(endpoints_.epochRuns(2).isOk());
  const NodeEndpoints::NcclId id = endpoints_.ncclId();
  EXPECT_EQ(id.id, "nccl");
  EXPECT_EQ(id.epoch, 2u);
  EXPECT_EQ(id.self, 1);
  membership_.endTransfers("node a lost");
  const auto ended = ring(2, {}, milliseconds(10));
  EXPECT_EQ(ended.status().code(), StatusCode::kAborted);
  EXPECT_THAT(ended.status().message(), HasSubstr("node a lost"));
}

TEST_F(JobEndpointsTest, ANodeOutsideItsJobsMembershipGetsNoRing) {
  membership_.joined({node("a:1", 0), node("c:1", 1)}, 1, "");
  const auto outside = ring(1, {}, milliseconds(10));
  EXPECT_EQ(outside.status().code(), StatusCode::kInternal);
  EXPECT_THAT(outside.status().message(), HasSubstr("not in its job's membership"));
}

}  // namespace
}  // namespace gradsync::peer
