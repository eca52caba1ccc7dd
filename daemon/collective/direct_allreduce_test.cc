// SPDX-License-Identifier: Apache-2.0
// The direct allreduce over real UCX workers, one thread per "daemon".
#include "daemon/collective/direct_allreduce.h"

#include <cstring>

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

class DirectAllreduceTest : public ::testing::TestWithParam<int> {};

// Values whose float sum depends on the order of the additions: every node
// must still get bitwise the same result, the sum in node order.
TEST_P(DirectAllreduceTest, EveryNodeGetsTheSumInNodeOrderBitwise) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  const size_t count = 1001;
  std::vector<std::vector<float>> data = orderSensitiveFloats(n, count);
  std::vector<float> expected(count);
  for (size_t i = 0; i < count; ++i) {
    float sum = data[0][i];
    for (int r = 1; r < n; ++r) sum += data[r][i];
    expected[i] = sum;
  }
  std::vector<std::vector<uint8_t>> scratch(n);
  for (uint64_t sequence : {3u, 4u}) {  // a second time: scratch reused, tags apart
    if (sequence == 4) {
      for (auto& d : data) d.assign(count, 0.5f);
      expected.assign(count, 0.5f * n);
    }
    auto statuses = onEveryNode(n, [&](int r) {
      return directAllreduce(contextFor(r, nodes[r], sequence), data[r].data(), count, v1::FLOAT32, v1::AVERAGE,
                             &scratch[r]);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
      ASSERT_EQ(std::memcmp(data[r].data(), expected.data(), count * sizeof(float)), 0) << "node " << r;
    }
  }
}

TEST_P(DirectAllreduceTest, Int32Max) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  std::vector<std::vector<int32_t>> data(n);
  for (int r = 0; r < n; ++r) data[r] = {r, -r, 7 * ((r + 1) % n), 5};
  std::vector<std::vector<uint8_t>> scratch(n);
  auto statuses = onEveryNode(n, [&](int r) {
    return directAllreduce(contextFor(r, nodes[r], 9), data[r].data(), 4, v1::INT32, v1::MAX, &scratch[r]);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    EXPECT_EQ(data[r], (std::vector<int32_t>{n - 1, 0, 7 * (n - 1), 5})) << "node " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, DirectAllreduceTest, ::testing::Values(2, 3, 4));

TEST(DirectAllreduceFailureTest, ASilentNodeTimesOutNamingTheCollective) {
  auto nodes = makeMesh(3);
  std::vector<float> data(4, 1.0f);
  std::vector<uint8_t> scratch;
  auto mesh = contextFor(0, nodes[0], 1);
  mesh.deadline = transport::Clock::now() + std::chrono::milliseconds(300);
  Status status = directAllreduce(mesh, data.data(), data.size(), v1::FLOAT32, v1::SUM, &scratch);
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("direct allreduce of node 0 with 2 other nodes"), std::string::npos)
      << status.toString();
  EXPECT_EQ(data, std::vector<float>(4, 1.0f)) << "left as it was";
}

}  // namespace
}  // namespace gradsync::collective
