// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/ring_movement.h"

#include "daemon/collective/ring_test_util.h"

namespace gradsync::collective {
namespace {

class RingMovementTest : public ::testing::TestWithParam<int> {};

TEST_P(RingMovementTest, BroadcastFromEveryRoot) {
  const int n = GetParam();
  auto nodes = makeRing(n);
  for (int root = 0; root < n; ++root) {
    const size_t bytes = 300001;
    std::vector<std::vector<uint8_t>> data(n, std::vector<uint8_t>(bytes, 0));
    for (size_t i = 0; i < bytes; ++i) data[root][i] = static_cast<uint8_t>(i * 7 + root);
    auto statuses = onEveryNode(nodes, [&](int r, Node& node) {
      return ringBroadcast(contextFor(r, n, node, 100 + root, 64 << 10), data[r].data(), bytes, root);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
      ASSERT_EQ(data[r], data[root]) << "node " << r << " root " << root;
    }
  }
}

TEST_P(RingMovementTest, AllgatherOfInterleavedRanges) {
  const int n = GetParam();
  auto nodes = makeRing(n);
  // 2n "ranks" of different sizes, owned round-robin (interleaved placement),
  // one of them empty.
  std::vector<std::vector<Range>> owned(n);
  size_t offset = 0;
  for (int k = 0; k < 2 * n; ++k) {
    const size_t bytes = k == 1 ? 0 : 1000 * (k + 1) + 3;
    owned[k % n].push_back({offset, bytes});
    offset += bytes;
  }
  std::vector<std::vector<uint8_t>> buffers(n, std::vector<uint8_t>(offset, 0xEE));
  for (int r = 0; r < n; ++r) {
    for (const Range& range : owned[r]) {
      for (size_t i = 0; i < range.bytes; ++i) buffers[r][range.offset + i] = static_cast<uint8_t>(r + 1 + i);
    }
  }
  auto statuses = onEveryNode(nodes, [&](int r, Node& node) {
    return ringAllgather(contextFor(r, n, node, 200, 4096), buffers[r].data(), owned);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    ASSERT_EQ(buffers[r], buffers[0]) << "node " << r;
  }
  for (int owner = 0; owner < n; ++owner) {
    for (const Range& range : owned[owner]) {
      for (size_t i = 0; i < range.bytes; ++i) {
        ASSERT_EQ(buffers[0][range.offset + i], static_cast<uint8_t>(owner + 1 + i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, RingMovementTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace gradsync::collective
