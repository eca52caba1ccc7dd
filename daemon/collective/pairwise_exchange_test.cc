// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/pairwise_exchange.h"

#include <thread>

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

// Bytes node `from` sends node `to` (some pairs send nothing).
size_t pairBytes(int from, int to) { return (from + 2 * to) % 3 == 0 ? 0 : 1000 * (from + 1) + 37 * to + 5; }
uint8_t pairByte(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i); }

class PairwiseExchangeTest : public ::testing::TestWithParam<int> {};

TEST_P(PairwiseExchangeTest, EveryNodeGetsExactlyWhatEachOtherSentIt) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  std::vector<std::vector<uint8_t>> send(n), recv(n);
  std::vector<std::vector<Range>> send_to(n, std::vector<Range>(n)), recv_from(n, std::vector<Range>(n));
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      send_to[a][b] = {send[a].size(), pairBytes(a, b)};
      for (size_t i = 0; i < pairBytes(a, b); ++i) send[a].push_back(pairByte(a, b, i));
      // Received in reverse order of senders: the layout is the receiver's.
    }
    size_t offset = 0;
    for (int b = n - 1; b >= 0; --b) {
      if (a == b) continue;
      recv_from[a][b] = {offset, pairBytes(b, a)};
      offset += pairBytes(b, a);
    }
    recv[a].assign(offset, 0xEE);
  }
  // Two exchanges in a row with different sequences: tags keep them apart.
  for (uint64_t sequence : {7u, 8u}) {
    auto statuses = onEveryNode(n, [&](int r) {
      return pairwiseExchange(contextFor(r, nodes[r], sequence), send[r].data(), send_to[r], recv[r].data(),
                              recv_from[r]);
    });
    for (int b = 0; b < n; ++b) {
      ASSERT_TRUE(statuses[b].isOk()) << statuses[b].toString();
      for (int a = 0; a < n; ++a) {
        if (a == b) continue;
        for (size_t i = 0; i < pairBytes(a, b); ++i) {
          ASSERT_EQ(recv[b][recv_from[b][a].offset + i], pairByte(a, b, i)) << a << " -> " << b << " at " << i;
        }
      }
    }
  }
}

TEST_P(PairwiseExchangeTest, AMissingSenderEndsAtTheDeadlineNamingTheExchange) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  std::vector<uint8_t> buffer(64);
  std::vector<Range> from(n, Range{0, 8});
  auto mesh = contextFor(0, nodes[0], 1);
  mesh.deadline = transport::Clock::now() + std::chrono::milliseconds(200);
  Status status = pairwiseExchange(mesh, buffer.data(), std::vector<Range>(n), buffer.data(), from);
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.toString();
  EXPECT_NE(status.message().find("pairwise exchange"), std::string::npos) << status.toString();
}

TEST(PairwiseExchange, RangesForTheWrongNumberOfNodesAreRefused) {
  auto nodes = makeMesh(2);
  std::vector<uint8_t> buffer(8);
  Status status = pairwiseExchange(contextFor(0, nodes[0], 1), buffer.data(), std::vector<Range>(3), buffer.data(),
                                   std::vector<Range>(2));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Nodes, PairwiseExchangeTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace gradsync::collective
