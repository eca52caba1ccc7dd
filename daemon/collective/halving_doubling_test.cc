// SPDX-License-Identifier: Apache-2.0
// Rabenseifner's allreduce over real UCX workers, one thread per "daemon".
#include "daemon/collective/halving_doubling.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

// Every message a node sends is one its peer receives at the same stage,
// with the same range; a node sends at most 2 log2 n + 2 messages, and at
// most about twice the buffer (a node that absorbs an extra one: the whole
// buffer more).
TEST(HalvingStepsTest, EverySendHasItsReceiveAndNodesSendTwoLogNMessages) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    for (int n = 1; n <= 40; ++n) {
      std::map<std::tuple<int, int, int>, std::pair<size_t, size_t>> sent, received;  // (from, to, stage)
      for (int r = 0; r < n; ++r) {
        int sends = 0;
        size_t elements = 0;
        for (const HalvingStep& s : halvingSteps(r, n, count)) {
          ASSERT_GE(s.peer, 0);
          ASSERT_LT(s.peer, n);
          ASSERT_NE(s.peer, r);
          ASSERT_LE(s.send.begin + s.send.count, count);
          ASSERT_LE(s.receive.begin + s.receive.count, count);
          sent[{r, s.peer, s.stage}] = {s.send.begin, s.send.count};
          received[{s.peer, r, s.stage}] = {s.receive.begin, s.receive.count};
          if (s.send.count > 0) ++sends;
          elements += s.send.count;
        }
        EXPECT_LE(sends, 2 * static_cast<int>(std::floor(std::log2(n))) + 2) << "n " << n << " node " << r;
        // (Odd halves round up: a few elements more per level.)
        EXPECT_LE(elements, 3 * count + 2 * static_cast<size_t>(std::log2(n))) << "n " << n << " node " << r;
      }
      // Drop the empty halves of a side that only receives or only sends.
      for (auto* m : {&sent, &received}) {
        for (auto it = m->begin(); it != m->end();) it = it->second.second == 0 ? m->erase(it) : std::next(it);
      }
      EXPECT_EQ(sent, received) << "n " << n << ", count " << count;
    }
  }
}

class HalvingDoublingTest : public ::testing::TestWithParam<int> {};

// Each part is reduced on one node and copied to the rest: every node ends
// with bitwise the same sum, close to the exact one.
TEST_P(HalvingDoublingTest, EveryNodeGetsBitwiseTheSameSum) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  std::vector<uint8_t> scratch[16];
  for (size_t count : {size_t{1}, size_t{3}, size_t{1001}, size_t{65536}}) {
    std::vector<std::vector<float>> data = orderSensitiveFloats(n, count);
    std::vector<double> exact(count, 0.0);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) exact[i] += data[r][i];
    }
    auto statuses = onEveryNode(n, [&](int r) {
      return halvingDoublingAllreduce(contextFor(r, nodes[r], count), data[r].data(), count, v1::FLOAT32, v1::AVERAGE,
                                      &scratch[r]);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
      ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), count * sizeof(float)), 0) << "node " << r;
    }
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NEAR(data[0][i], exact[i], std::abs(exact[i]) * 1e-6 + 1e-3) << "element " << i << ", count " << count;
    }
  }
}

TEST_P(HalvingDoublingTest, Int64SumMaxAndMinExactly) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  std::vector<uint8_t> scratch[16];
  const size_t count = 37;
  for (ReduceOp op : {v1::SUM, v1::MAX, v1::MIN}) {
    std::vector<std::vector<int64_t>> data(n, std::vector<int64_t>(count));
    std::vector<int64_t> expected(count);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < n; ++r) {
        data[r][i] = (r * 7919 + static_cast<int64_t>(i) * 104729) % 1000 - 500;
        const int64_t v = data[r][i];
        expected[i] = r == 0          ? v
                      : op == v1::SUM ? expected[i] + v
                      : op == v1::MAX ? std::max(expected[i], v)
                                      : std::min(expected[i], v);
      }
    }
    auto statuses = onEveryNode(n, [&](int r) {
      return halvingDoublingAllreduce(contextFor(r, nodes[r], 100 + op), data[r].data(), count, v1::INT64, op,
                                      &scratch[r]);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
      EXPECT_EQ(data[r], expected) << "node " << r << ", op " << op;
    }
  }
}

// A node that never takes part: the others fail at the deadline, naming
// the algorithm and the partner, instead of waiting forever.
TEST(HalvingDoublingFailureTest, AMissingNodeFailsTheOthersAtTheDeadlineNamingIt) {
  const int n = 4;
  auto nodes = makeMesh(n);
  auto statuses = onEveryNode(n - 1, [&](int r) {
    MeshContext mesh = contextFor(r, nodes[r], 1);
    mesh.deadline = transport::Clock::now() + std::chrono::milliseconds(300);
    std::vector<float> values(64, 1.0f);
    std::vector<uint8_t> scratch;
    return halvingDoublingAllreduce(mesh, values.data(), values.size(), v1::FLOAT32, v1::SUM, &scratch);
  });
  for (int r = 0; r < n - 1; ++r) {
    ASSERT_FALSE(statuses[r].isOk()) << "node " << r;
    EXPECT_NE(statuses[r].message().find("halving and doubling"), std::string::npos) << statuses[r].toString();
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, HalvingDoublingTest, ::testing::Values(2, 3, 4, 5, 6, 7, 8, 11, 16));

}  // namespace
}  // namespace gradsync::collective
