// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/allreduce_choice.h"

#include "daemon/collective/direct_allreduce.h"
#include "gtest/gtest.h"

namespace gradsync::collective {
namespace {

using A = AllreduceAlgorithm;

TEST(AllreduceChoiceTest, SmallBuffersGoDirectAmongFewNodesAndByDoublingAmongMany) {
  EXPECT_EQ(chooseAllreduce(4, 2), A::kDirect);
  EXPECT_EQ(chooseAllreduce(4, 4), A::kDirect);
  EXPECT_EQ(chooseAllreduce(4, 8), A::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(4, 16), A::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(4, 1000), A::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(65536, 16), A::kRecursiveDoubling);
}

TEST(AllreduceChoiceTest, LargeBuffersTakeTheRing) {
  EXPECT_EQ(chooseAllreduce(64 << 20, 2), A::kRing);  // past doubling's limit
  EXPECT_EQ(chooseAllreduce(1 << 20, 2), A::kRing);   // the same bytes, pipelined
  EXPECT_EQ(chooseAllreduce(64 << 20, 16), A::kRing);
  EXPECT_EQ(chooseAllreduce(1 << 20, 16), A::kRing);
  // Among many nodes the ring's 2(n-1) latencies outweigh doubling's bytes.
  EXPECT_EQ(chooseAllreduce(1 << 20, 1024), A::kRecursiveDoubling);
}

TEST(AllreduceChoiceTest, TheDirectExchangeKeepsItsScratchSmall) {
  // 64 KiB to each of 15 others: over the direct exchange's limit.
  EXPECT_NE(chooseAllreduce(65536, 16), A::kDirect);
  for (int n : {2, 3, 5, 17, 1000}) {
    for (size_t bytes : {size_t{4}, size_t{4096}, size_t{1} << 16, size_t{1} << 20, size_t{1} << 26}) {
      const A choice = chooseAllreduce(bytes, n);
      for (A other : {A::kDirect, A::kRecursiveDoubling, A::kRing}) {
        const bool allowed = (other != A::kDirect || bytes * (n - 1) <= kDirectAllreduceMaxBytes) &&
                             (other != A::kRecursiveDoubling || bytes <= kDoublingMaxBytes);
        if (allowed) EXPECT_LE(modelledUs(choice, bytes, n, {}), modelledUs(other, bytes, n, {})) << n << " " << bytes;
      }
    }
  }
}

}  // namespace
}  // namespace gradsync::collective
