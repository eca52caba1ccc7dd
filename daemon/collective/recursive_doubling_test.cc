// SPDX-License-Identifier: Apache-2.0
// Recursive doubling over real UCX workers, one thread per "daemon".
#include "daemon/collective/recursive_doubling.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

// Every message a node sends is one its peer receives at the same stage,
// and no node sends more than log2(n) + 2 messages (an absorbing node: the
// swap, the exchanges, the result).
TEST(DoublingStepsTest, EverySendHasItsReceiveAndNodesSendLogNMessages) {
  for (int n = 1; n <= 40; ++n) {
    std::map<std::tuple<int, int, int>, int> sent, received;  // (from, to, stage)
    for (int r = 0; r < n; ++r) {
      int sends = 0;
      for (const DoublingStep& s : doublingSteps(r, n)) {
        ASSERT_GE(s.peer, 0);
        ASSERT_LT(s.peer, n);
        ASSERT_NE(s.peer, r);
        if (s.kind != DoublingStep::kReceive) ++sent[{r, s.peer, s.stage}], ++sends;
        if (s.kind != DoublingStep::kSend) ++received[{s.peer, r, s.stage}];
      }
      EXPECT_LE(sends, static_cast<int>(std::floor(std::log2(n))) + 2) << "n " << n << " node " << r;
    }
    EXPECT_EQ(sent, received) << "n " << n;
    for (const auto& [key, count] : sent) EXPECT_EQ(count, 1) << "n " << n;
  }
}

// The sum in recursive doubling's order (the lower position first at each
// exchange), as every node must compute it.
std::vector<float> doublingOrderSum(std::vector<std::vector<float>> v) {
  const int n = static_cast<int>(v.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int r = 0; r + p < n; ++r) {
    for (size_t i = 0; i < v[r].size(); ++i) v[r][i] = v[r][i] + v[r + p][i];
  }
  for (int distance = 1; distance < p; distance *= 2) {
    auto next = v;
    for (int r = 0; r < p; ++r) {
      const int lo = std::min(r, r ^ distance), hi = std::max(r, r ^ distance);
      for (size_t i = 0; i < v[r].size(); ++i) next[r][i] = v[lo][i] + v[hi][i];
    }
    v = next;
  }
  return v[0];
}

class RecursiveDoublingTest : public ::testing::TestWithParam<int> {};

TEST_P(RecursiveDoublingTest, EveryNodeGetsBitwiseTheSameSum) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  const size_t count = 1001;
  std::vector<std::vector<float>> data = orderSensitiveFloats(n, count);
  const std::vector<float> expected = doublingOrderSum(data);
  for (uint64_t sequence : {3u, 4u}) {  // a second run: tags apart
    if (sequence == 4) {
      for (auto& d : data) d.assign(count, 0.5f);
    }
    auto statuses = onEveryNode(n, [&](int r) {
      return recursiveDoublingAllreduce(contextFor(r, nodes[r], sequence), data[r].data(), count, v1::FLOAT32,
                                        v1::AVERAGE);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
      if (sequence == 3) {
        ASSERT_EQ(std::memcmp(data[r].data(), expected.data(), count * sizeof(float)), 0) << "node " << r;
      } else {
        ASSERT_EQ(data[r], std::vector<float>(count, 0.5f * n)) << "node " << r;
      }
    }
  }
}

TEST_P(RecursiveDoublingTest, Int32MaxAndMin) {
  const int n = GetParam();
  auto nodes = makeMesh(n);
  std::vector<std::vector<int32_t>> data(n);
  for (int r = 0; r < n; ++r) data[r] = {r, -r, 7 * ((r + 1) % n), 5};
  auto statuses = onEveryNode(n, [&](int r) {
    return recursiveDoublingAllreduce(contextFor(r, nodes[r], 9), data[r].data(), 4, v1::INT32, v1::MAX);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    EXPECT_EQ(data[r], (std::vector<int32_t>{n - 1, 0, 7 * (n - 1), 5})) << "node " << r;
  }
  statuses = onEveryNode(n, [&](int r) {
    return recursiveDoublingAllreduce(contextFor(r, nodes[r], 10), data[r].data(), 4, v1::INT32, v1::MIN);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    EXPECT_EQ(data[r], (std::vector<int32_t>{n - 1, 0, 7 * (n - 1), 5})) << "node " << r;
  }
}

// A node that never takes part: the others fail at the deadline, naming
// the step and the partner, instead of waiting forever.
TEST(RecursiveDoublingFailureTest, AMissingNodeFailsTheOthersAtTheDeadlineNamingIt) {
  const int n = 4;
  auto nodes = makeMesh(n);
  std::vector<float> data(n, 1.0f);
  auto statuses = onEveryNode(n - 1, [&](int r) {
    MeshContext mesh = contextFor(r, nodes[r], 1);
    mesh.deadline = transport::Clock::now() + std::chrono::milliseconds(300);
    float value = 1.0f;
    return recursiveDoublingAllreduce(mesh, &value, 1, v1::FLOAT32, v1::SUM);
  });
  for (int r = 0; r < n - 1; ++r) {
    ASSERT_FALSE(statuses[r].isOk()) << "node " << r;
    EXPECT_NE(statuses[r].message().find("recursive doubling"), std::string::npos) << statuses[r].toString();
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, RecursiveDoublingTest, ::testing::Values(2, 3, 4, 5, 6, 7, 8, 9));

}  // namespace
}  // namespace gradsync::collective
