// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/response_cache.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

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
  for (auto& q : on_gpu.requests.mutableAll()) q->cuda = coordinator::CudaRef{1, 0, 0};
  auto gpu = cache.assign(on_gpu);
  EXPECT_NE(gpu.first, first.first);
  EXPECT_TRUE(gpu.second);
  auto moved = response("w", 8, 10);
  for (auto& q : moved.requests.mutableAll()) q->cuda = coordinator::CudaRef{7, 4096, 3};
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

// Every field of a request's metadata: changed in one rank's request, the
// response is another (not uniform any more); changed in every rank's, it
// is another too. Guards sameMetadata against a field that
// metadataSignature writes and it would not compare.
TEST(ResponseCacheTest, EveryMetadataFieldTellsResponsesApart) {
  using Change = std::function<void(coordinator::Request*)>;
  const std::vector<std::pair<std::string, Change>> changes = {
      {"name", [](coordinator::Request* q) { q->name += "x"; }},
      {"type", [](coordinator::Request* q) { q->type = v1::BROADCAST; }},
      {"dtype", [](coordinator::Request* q) { q->dtype = v1::FLOAT64; }},
      {"op", [](coordinator::Request* q) { q->op = v1::MAX; }},
      {"prescale", [](coordinator::Request* q) { q->prescale = 1.0000001; }},
      {"postscale", [](coordinator::Request* q) { q->postscale = 0.99999999; }},
      {"root_rank", [](coordinator::Request* q) { q->root_rank = 1; }},
      {"process_set_id", [](coordinator::Request* q) { q->process_set_id = 3; }},
      {"length", [](coordinator::Request* q) { q->length += 4; }},
      {"group_id", [](coordinator::Request* q) { q->group_id = 9; }},
      {"group_size", [](coordinator::Request* q) { q->group_size = 2; }},
      {"cuda",
       [](coordinator::Request* q) {
         q->cuda = coordinator::CudaRef{1, 0, 0};
       }},
      {"cuda_output",
       [](coordinator::Request* q) {
         q->cuda_output = coordinator::CudaRef{1, 0, 0};
       }},
      {"shape",
       [](coordinator::Request* q) {
         q->shape = {2, 4};
       }},
      {"splits",
       [](coordinator::Request* q) {
         q->splits = {1, 1};
       }},
      {"target_set", [](coordinator::Request* q) { q->target_set = 2; }},
      {"set_ranks",
       [](coordinator::Request* q) {
         q->set_ranks = {0, 1};
       }},
  };
  const std::string base = ResponseCache::signature(response("w", 8, 10));
  for (const auto& [field, change] : changes) {
    auto one = response("w", 8, 10);
    change(&*one.requests.mutableAt(1));
    EXPECT_NE(ResponseCache::signature(one), base) << field << " changed in one rank";
    EXPECT_FALSE(ResponseCache::sameMetadata(*one.requests[0], *one.requests[1])) << field;
    auto all = response("w", 8, 10);
    for (auto& q : all.requests.mutableAll()) change(&*q);
    EXPECT_NE(ResponseCache::signature(all), base) << field << " changed in every rank";
    EXPECT_NE(ResponseCache::signature(all), ResponseCache::signature(one)) << field;
  }
  // Where the data lies is no part of it.
  auto moved = response("w", 8, 99);
  moved.requests.mutableAt(0)->output_length = 64;
  moved.requests.mutableAt(1)->call = 7;
  EXPECT_EQ(ResponseCache::signature(moved), base);
}

// A uniform response is kept once for all its ranks: a rank of it finds its
// id, a rank outside it does not; responses whose ranks asked differently
// keep an entry per rank.
TEST(ResponseCacheTest, UniformAndMixedResponsesFindTheirRanks) {
  ResponseCache follower(100);
  coordinator::Response wide;
  wide.name = "wide";
  wide.type = v1::ALLREDUCE;
  for (int rank = 0; rank < 4096; rank += 2) {
    coordinator::Request q = response("wide", 16, 1).requests[0].value();
    q.rank = rank;
    wide.ranks.push_back(rank);
    wide.requests.push_back(q);
  }
  follower.remember(7, wide);
  coordinator::Request mine = wide.requests[1000].value();
  mine.handle = 12345;
  EXPECT_EQ(follower.idFor(mine), 7u);
  mine.rank = 2001;  // not in the response
  EXPECT_EQ(follower.idFor(mine), 0u);

  auto mixed = response("m", 8, 1);
  mixed.requests.mutableAt(1)->prescale = 0.5;
  follower.remember(8, mixed);
  EXPECT_EQ(follower.idFor(mixed.requests[0].value()), 8u);
  EXPECT_EQ(follower.idFor(mixed.requests[1].value()), 8u);
  auto other = mixed.requests[1].value();
  other.prescale = 0.25;
  EXPECT_EQ(follower.idFor(other), 0u);
}

// A response whose requests all repeat a cached one (Request::repeats, set
// by the leader when it expands a request by cache id) gets that id
// without a key built; one whose requests do not all repeat it is keyed.
TEST(ResponseCacheTest, ARepeatedResponseKeepsItsIdWithoutAKey) {
  ResponseCache leader(100);
  const uint64_t id = leader.assign(response("w", 8, 10)).first;
  ASSERT_NE(id, 0u);
  coordinator::Response repeated = response("w", 8, 20);
  for (auto& request : repeated.requests.mutableAll()) request->repeats = id;
  EXPECT_EQ(leader.assign(repeated), std::make_pair(id, false));
  // Tagged with an id of another response: keyed, and new.
  const uint64_t other = leader.assign(response("v", 8, 10)).first;
  coordinator::Response mistagged = response("w", 16, 20);
  for (auto& request : mistagged.requests.mutableAll()) request->repeats = other;
  auto fresh = leader.assign(mistagged);
  EXPECT_NE(fresh.first, id);
  EXPECT_TRUE(fresh.second);
  // One rank not known to repeat it: keyed, and found the same.
  coordinator::Response partly = response("w", 8, 30);
  partly.requests.mutableAt(0)->repeats = id;
  EXPECT_EQ(leader.assign(partly), std::make_pair(id, false));
}

}  // namespace
}  // namespace gradsync::peer
