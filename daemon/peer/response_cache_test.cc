// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/response_cache.h"

#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

coordinator::Response response(const std::string& name, int64_t dim, uint64_t handle_base) {
  coordinator::Response r;
  r.name = name;
  r.type = v1::ALLREDUCE;
  r.ranks = {0, 1};
  for (int rank = 0; rank < 2; ++rank) {
    coordinator::Request q;
    q.rank = rank;
    q.name = name;
    q.type = v1::ALLREDUCE;
    q.dtype = v1::FLOAT32;
    q.shape = {dim};
    q.length = dim * 4;
    q.handle = handle_base + rank;  // differs every step
    q.offset = 4096 * (handle_base + rank);
    r.requests.push_back(q);
  }
  return r;
}

TEST(ResponseCacheTest, SameMetadataSameIdAcrossStepsAndFollowerFindsIt) {
  ResponseCache leader(100), follower(100);
  auto [id, fresh] = leader.assign(response("w", 8, 10));
  EXPECT_NE(id, 0u);
  EXPECT_TRUE(fresh);
  follower.remember(id, response("w", 8, 10));
  auto again = leader.assign(response("w", 8, 20));  // next step: other handles and offsets
  EXPECT_EQ(again.first, id);
  EXPECT_FALSE(again.second);
  coordinator::Request next = response("w", 8, 30).requests[1].value();
  EXPECT_EQ(follower.idFor(next), id);
  ASSERT_NE(follower.find(id), nullptr);
  EXPECT_EQ(follower.find(id)->name, "w");
}

// A new epoch empties both sides; the same metadata then travels in full
// again, under an id never used before.
TEST(ResponseCacheTest, ClearedCacheForgetsEverythingAndNeverReusesAnId) {
  ResponseCache leader(100), follower(100);
  const uint64_t id = leader.assign(response("w", 8, 10)).first;
  follower.remember(id, response("w", 8, 10));
  leader.clear();
  follower.clear();
  EXPECT_EQ(follower.find(id), nullptr);
  EXPECT_EQ(follower.idFor(response("w", 8, 30).requests[0].value()), 0u);
  auto [again, fresh] = leader.assign(response("w", 8, 20));
  EXPECT_TRUE(fresh);
  EXPECT_GT(again, id);
}

TEST(ResponseCacheTest, ChangedMetadataIsNotAHit) {
  ResponseCache cache(100);
  auto first = cache.assign(response("w", 8, 10));
  auto reshaped = cache.assign(response("w", 9, 10));
  EXPECT_NE(first.first, reshaped.first);
  EXPECT_TRUE(reshaped.second);
  coordinator::Request other = response("w", 10, 1).requests[0].value();
  EXPECT_EQ(cache.idFor(other), 0u);
  // The same tensors on a GPU are other metadata; where on the GPU they lie
  // is not.
  auto on_gpu = response("w", 8, 10);
  for (auto& q : on_gpu.requests) q->cuda = coordinator::CudaRef{1, 0, 0};
  auto gpu = cache.assign(on_gpu);
  EXPECT_NE(gpu.first, first.first);
  EXPECT_TRUE(gpu.second);
  auto moved = response("w", 8, 10);
  for (auto& q : moved.requests) q->cuda = coordinator::CudaRef{7, 4096, 3};
  EXPECT_EQ(cache.assign(moved), std::make_pair(gpu.first, false));
  EXPECT_EQ(cache.idFor(moved.requests[0].value()), gpu.first);
}

TEST(ResponseCacheTest, FailedResponsesAreNotCachedAndCapacityHolds) {
  ResponseCache cache(2);
  auto failed = response("x", 4, 1);
  failed.status = failedPrecondition("mismatch");
  EXPECT_EQ(cache.assign(failed).first, 0u);
  EXPECT_NE(cache.assign(response("a", 1, 1)).first, 0u);
  EXPECT_NE(cache.assign(response("b", 1, 1)).first, 0u);
  EXPECT_EQ(cache.assign(response("c", 1, 1)).first, 0u);  // full
}

TEST(ResponseCacheTest, BarriersAreNotCached) {
  ResponseCache cache(8);
  auto barrier = response("barrier.1", 1, 1);
  barrier.type = v1::BARRIER;
  EXPECT_EQ(cache.assign(barrier).first, 0u);
  EXPECT_EQ(cache.idFor(barrier.requests[0].value()), 0u);
}

}  // namespace
}  // namespace gradsync::peer
