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
  EXPECT_EQ(chooseAllreduce(4096, 16), A::kRecursiveDoubling);
}

TEST(AllreduceChoiceTest, MediumBuffersAmongFourOrMoreNodesHalveAndDouble) {
  EXPECT_EQ(chooseAllreduce(65536, 4), A::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(65536, 16), A::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(1 << 20, 16), A::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(1 << 20, 1024), A::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(16 << 20, 1024), A::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(4 << 20, 16), A::kRing);  // the ring reduces while it moves
  // Two nodes: as many steps as the ring, which pipelines; 5 nodes: the
  // extra node's whole buffer in and out costs more than the ring's steps.
  EXPECT_EQ(chooseAllreduce(1 << 20, 2), A::kRing);
  EXPECT_EQ(chooseAllreduce(1 << 20, 5), A::kRing);
}

TEST(AllreduceChoiceTest, LargeBuffersTakeTheRing) {
  EXPECT_EQ(chooseAllreduce(64 << 20, 2), A::kRing);   // past doubling's limit
  EXPECT_EQ(chooseAllreduce(1 << 20, 2), A::kRing);    // the same bytes, pipelined
  EXPECT_EQ(chooseAllreduce(64 << 20, 16), A::kRing);  // past halving's limit
}

TEST(AllreduceChoiceTest, TheChoiceIsTheCheapestAllowed) {
  // 64 KiB to each of 15 others: over the direct exchange's limit.
  EXPECT_NE(chooseAllreduce(65536, 16), A::kDirect);
  for (int n : {2, 3, 5, 17, 1000}) {
    for (size_t bytes : {size_t{4}, size_t{4096}, size_t{1} << 16, size_t{1} << 20, size_t{1} << 26}) {
      const A choice = chooseAllreduce(bytes, n);
      for (A other : {A::kDirect, A::kRecursiveDoubling, A::kRing, A::kHalvingDoubling}) {
        const bool allowed = (other != A::kDirect || bytes * (n - 1) <= kDirectAllreduceMaxBytes) &&
                             (other != A::kRecursiveDoubling || bytes <= kDoublingMaxBytes) &&
                             (other != A::kHalvingDoubling || bytes <= kHalvingMaxBytes);
        if (allowed) EXPECT_LE(modelledUs(choice, bytes, n, {}), modelledUs(other, bytes, n, {})) << n << " " << bytes;
      }
    }
  }
}

}  // namespace
}  // namespace gradsync::collective
