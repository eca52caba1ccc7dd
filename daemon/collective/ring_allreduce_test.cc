// SPDX-License-Identifier: Apache-2.0
// Ring allreduce over real UCX workers, one thread per "daemon".
#include "daemon/collective/ring_allreduce.h"

#include <thread>

#include "daemon/collective/reduce/half.h"
#include "daemon/collective/ring_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {


class RingAllreduceTest : public ::testing::TestWithParam<int> {};

TEST_P(RingAllreduceTest, Float32SumInChunks) {
  const int n = GetParam();
  auto nodes = makeRing(n);
  const size_t count = 1000003;
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>((r + 1) * (i % 13));
  }
  auto statuses = onEveryNode(nodes, [&](int r, Node& node) {
    std::vector<uint8_t> scratch;
    return ringAllreduce(contextFor(r, n, node, 1, 64 << 10), data[r].data(), count, v1::FLOAT32, v1::SUM, &scratch);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    for (size_t i = 0; i < count; i += 997) {
      ASSERT_EQ(data[r][i], n * (n + 1) / 2.0f * (i % 13)) << "rank " << r << " element " << i;
    }
    ASSERT_EQ(data[r][count - 1], n * (n + 1) / 2.0f * ((count - 1) % 13));
  }
}

TEST_P(RingAllreduceTest, IntMaxHalfSumAndTinyCounts) {
  const int n = GetParam();
  auto nodes = makeRing(n);
  std::vector<std::vector<int32_t>> ints(n, std::vector<int32_t>(5000));
  std::vector<std::vector<uint16_t>> halves(n, std::vector<uint16_t>(777));
  std::vector<std::vector<double>> tiny(n, std::vector<double>(1));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < ints[r].size(); ++i) ints[r][i] = static_cast<int32_t>((i * 7 + r * 31) % 1000);
    for (auto& h : halves[r]) h = reduce::floatToHalf(0.5f * (r + 1));
    tiny[r][0] = r + 1;
  }
  auto statuses = onEveryNode(nodes, [&](int r, Node& node) {
    std::vector<uint8_t> scratch;
    RETURN_IF_ERROR(ringAllreduce(contextFor(r, n, node, 7, 4096), ints[r].data(), ints[r].size(), v1::INT32, v1::MAX, &scratch));
    RETURN_IF_ERROR(ringAllreduce(contextFor(r, n, node, 8, 4096), halves[r].data(), halves[r].size(), v1::FLOAT16, v1::SUM, &scratch));
    return ringAllreduce(contextFor(r, n, node, 9, 4096), tiny[r].data(), 1, v1::FLOAT64, v1::SUM, &scratch);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    for (size_t i = 0; i < ints[r].size(); ++i) {
      int32_t want = 0;
      for (int q = 0; q < n; ++q) want = std::max<int32_t>(want, static_cast<int32_t>((i * 7 + q * 31) % 1000));
      ASSERT_EQ(ints[r][i], want) << "rank " << r << " element " << i;
    }
    EXPECT_EQ(reduce::halfToFloat(halves[r][776]), 0.25f * n * (n + 1));
    EXPECT_EQ(tiny[r][0], n * (n + 1) / 2.0);
  }
}

TEST(RingAllreduceFailureTest, MissingPeerTimesOutNamingIt) {
  auto nodes = makeRing(2);
  std::vector<float> data(1000, 1.0f);
  std::vector<uint8_t> scratch;
  RingContext ring = contextFor(0, 2, nodes[0], 3, 4096);
  ring.deadline = transport::Clock::now() + std::chrono::milliseconds(300);
  Status s = ringAllreduce(ring, data.data(), data.size(), v1::FLOAT32, v1::SUM, &scratch);  // node 1 never joins
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("daemons of ranks 1 (left) and 1 (right)"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Nodes, RingAllreduceTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace gradsync::collective
