// SPDX-License-Identifier: Apache-2.0
// The link probe over real UCX workers, one thread per "daemon".
#include "daemon/collective/link_probe.h"

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

class LinkProbeTest : public ::testing::TestWithParam<int> {};

// Every node ends with bitwise the same cost, within the bounds, and the
// figures not measured stay the defaults'.
TEST_P(LinkProbeTest, EveryNodeAgreesOnOneCost) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  LinkCost defaults;
  defaults.reduce_byte_us = 0.125;
  std::vector<LinkCost> costs(n);
  auto statuses = onEveryNode(n, [&](int r) -> Status {
    ASSIGN_OR_RETURN(costs[r], probeLinkCost(contextFor(r, nodes[r], 77), defaults));
    return okStatus();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].isOk()) << "node " << r << ": " << statuses[r].message();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(costs[r].latency_us, costs[0].latency_us) << "node " << r;
    EXPECT_EQ(costs[r].message_us, costs[0].message_us) << "node " << r;
    EXPECT_EQ(costs[r].byte_us, costs[0].byte_us) << "node " << r;
    EXPECT_EQ(costs[r].reduce_byte_us, 0.125);
  }
  EXPECT_GE(costs[0].latency_us, 1.0);
  EXPECT_LE(costs[0].latency_us, 1e6);
  EXPECT_GE(costs[0].byte_us, 1e-6);
  EXPECT_LE(costs[0].byte_us, 1.0);
  if (n == 2) EXPECT_EQ(costs[0].message_us, defaults.message_us);  // not measured between two
  std::printf("%d nodes: latency %.1f us, %.2f us per message, %.2f GB/s\n", n, costs[0].latency_us,
              costs[0].message_us, 1e-3 / costs[0].byte_us);
}

INSTANTIATE_TEST_SUITE_P(Nodes, LinkProbeTest, ::testing::Values(2, 3, 5));

// A node that never comes: the probe ends at the mesh's deadline, naming
// the run.
TEST(LinkProbeFailureTest, AMissingNodeEndsTheProbeAtTheDeadline) {
  auto nodes = makeMesh(2);
  MeshContext mesh = contextFor(0, nodes[0], 5);
  mesh.deadline = transport::Clock::now() + std::chrono::milliseconds(300);
  auto cost = probeLinkCost(mesh);
  ASSERT_FALSE(cost.isOk());
  EXPECT_NE(cost.status().message().find("link probe"), std::string::npos) << cost.status().message();
}

}  // namespace
}  // namespace gradsync::collective
