// SPDX-License-Identifier: Apache-2.0
// Ring allreduce over real UCX workers, one thread per "daemon".
#include "daemon/collective/ring_allreduce.h"

#include <thread>

#include "daemon/collective/reduce/half.h"
#include "daemon/collective/ring_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

// Sums `count` floats across n nodes in chunks of `chunk` bytes.
void expectFloat32Sum(int n, size_t count, size_t chunk, const transport::UcxOptions& options = {}) {
  auto nodes = makeRing(n, options);
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>((r + 1) * (i % 13));
  }
  auto statuses = onEveryNode(nodes, [&](int r, Node& node) {
    std::vector<uint8_t> scratch;
    return ringAllreduce(contextFor(r, n, node, 1, chunk), data[r].data(), count, v1::FLOAT32, v1::SUM, &scratch);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    for (size_t i = 0; i < count; i += 997) {
      ASSERT_EQ(data[r][i], n * (n + 1) / 2.0f * (i % 13)) << "rank " << r << " element " << i;
    }
    ASSERT_EQ(data[r][count - 1], n * (n + 1) / 2.0f * ((count - 1) % 13));
  }
}

class RingAllreduceTest : public ::testing::TestWithParam<int> {};

TEST_P(RingAllreduceTest, Float32SumInChunks) { expectFloat32Sum(GetParam(), 1000003, 64 << 10); }

// The daemon's data plane: tcp segments of 512 KiB (UCX's are 8 and 64
// KiB), chunks of 1 MiB, an odd count.
TEST_P(RingAllreduceTest, Float32SumOverLargeTcpSegments) {
  expectFloat32Sum(GetParam(), 3000017, 1 << 20, transport::UcxOptions{"", 512 << 10});
}

// Ranks placed round-robin on the nodes: each node owns several
// interleaved ranges (one empty), cut into chunks smaller than a range.
TEST_P(RingAllreduceTest, ReduceScatterLeavesEachNodeItsOwnRangesReduced) {
  const int n = GetParam();
  auto nodes = makeRing(n);
  const size_t rows = 4 * n + 1, row = 2501;  // rows of `row` elements, owner row % n
  std::vector<std::vector<ElementRange>> owned(n);
  for (size_t r = 0; r < rows; ++r) {
    if (r == 1) continue;  // nobody's: partial sums are fine there
    owned[r % n].push_back({r * row, row});
  }
  owned[0].push_back({rows * row, 0});
  // Node 0 reduces in place; the others read a separate input, left as it was.
  std::vector<std::vector<int32_t>> input(n, std::vector<int32_t>(rows * row)), data(n);
  for (int k = 0; k < n; ++k) {
    for (size_t i = 0; i < input[k].size(); ++i) input[k][i] = static_cast<int32_t>((k + 1) * (i % 101));
    data[k] = k == 0 ? input[k] : std::vector<int32_t>(rows * row, -1);
  }
  const auto before = input;
  auto statuses = onEveryNode(nodes, [&](int k, Node& node) {
    std::vector<uint8_t> scratch;
    const void* in = k == 0 ? static_cast<const void*>(data[0].data()) : input[k].data();
    return ringReduceScatter(contextFor(k, n, node, 7, 4000), in, data[k].data(), v1::INT32, v1::SUM, owned, &scratch);
  });
  for (int k = 0; k < n; ++k) {
    ASSERT_TRUE(statuses[k].isOk()) << statuses[k].toString();
    if (k > 0) EXPECT_EQ(input[k], before[k]) << "node " << k << "'s input was written";
    for (const ElementRange& range : owned[k]) {
      for (size_t i = range.begin; i < range.begin + range.count; ++i) {
        ASSERT_EQ(data[k][i], n * (n + 1) / 2 * static_cast<int32_t>(i % 101)) << "node " << k << " element " << i;
      }
    }
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
    RETURN_IF_ERROR(
        ringAllreduce(contextFor(r, n, node, 7, 4096), ints[r].data(), ints[r].size(), v1::INT32, v1::MAX, &scratch));
    RETURN_IF_ERROR(ringAllreduce(contextFor(r, n, node, 8, 4096), halves[r].data(), halves[r].size(), v1::FLOAT16,
                                  v1::SUM, &scratch));
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

// A third worker that knows node 0's address but not the job's key sends
// messages with the tags of the collective computed without the key (and a
// guessed key): none is reduced, and node 0 drops and counts them after.
TEST(RingAllreduceSecurityTest, TransfersWithoutTheJobsKeyAreNeverReduced) {
  auto nodes = makeRing(2);
  const SipKey key = deriveSipKey("job secret", "test tags");
  auto intruder_transport = UcxTransport::create();
  ASSERT_TRUE(intruder_transport.isOk());
  auto intruder = std::move(intruder_transport).value();
  auto target = intruder->connect(nodes[0].transport->address(), "rank 0");
  ASSERT_TRUE(target.isOk());
  std::vector<float> poison(256, 1e6f);
  std::vector<transport::RequestPtr> sends;
  for (const SipKey& guess : {SipKey{}, deriveSipKey("guessed", "test tags")}) {
    for (int step = 0; step < 2; ++step) {
      sends.push_back(
          (*target)->isend(poison.data(), poison.size() * sizeof(float), ringTag(guess, TransferId{}, 0, step, 0, 1)));
    }
  }
  // The intruder's connection completes only while node 0 drives its
  // worker: its sends go on beside the collective.
  Status intruded;
  std::thread intrusion([&] {
    std::vector<transport::Request*> raw;
    for (auto& s : sends) raw.push_back(s.get());
    intruded = intruder->waitAll(raw.data(), raw.size(), transport::Clock::now() + std::chrono::seconds(20), "intrude");
  });

  std::vector<std::vector<float>> data(2, std::vector<float>(256, 1.0f));
  auto statuses = onEveryNode(nodes, [&](int r, Node& node) {
    std::vector<uint8_t> scratch;
    RingContext ring = contextFor(r, 2, node, 7, 64 << 10);
    ring.tag_key = key;
    return ringAllreduce(ring, data[r].data(), data[r].size(), v1::FLOAT32, v1::SUM, &scratch);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    for (float v : data[r]) ASSERT_EQ(v, 2.0f) << "rank " << r;
  }
  size_t dropped = 0;
  const auto until = transport::Clock::now() + std::chrono::seconds(20);
  while (dropped < 4 && transport::Clock::now() < until) dropped += nodes[0].transport->dropStrays();
  intrusion.join();
  EXPECT_TRUE(intruded.isOk()) << intruded.toString();
  EXPECT_EQ(dropped, 4u);
  EXPECT_EQ(nodes[1].transport->dropStrays(), 0u);
}

TEST(RingAllreduceFailureTest, MissingPeerTimesOutNamingIt) {
  auto nodes = makeRing(2);
  std::vector<float> data(1000, 1.0f);
  std::vector<uint8_t> scratch;
  RingContext ring = contextFor(0, 2, nodes[0], 3, 4096);
  ring.deadline = transport::Clock::now() + std::chrono::milliseconds(300);
  Status s = ringAllreduce(ring, data.data(), data.size(), v1::FLOAT32, v1::SUM, &scratch);  // node 1 never joins
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("with rank 1 (left) and rank 1 (right)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(pending: receive from rank 1)"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Nodes, RingAllreduceTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace gradsync::collective
