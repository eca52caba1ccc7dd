// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/coordination_codec.h"

#include "daemon/coordinator/request_wire.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

// One step's allreduce of `name` by ranks 0 and 1 (handles and offsets
// differ every step; the metadata does not).
coordinator::Response step(const std::string& name, uint64_t handle_base) {
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
    q.shape = {8};
    q.length = 32;
    q.handle = handle_base + rank;
    q.offset = 4096 * (handle_base + rank);
    r.requests.push_back(q);
  }
  return r;
}

TEST(CoordinationCodecTest, RepeatedResponseTravelsByIdAloneAndDecodesWithThisNodesHandles) {
  // The follower holds rank 1; rank 0 is the leader's.
  CoordinationCodec leader("job", 16), follower("job", 16);
  (void)follower.compact(1, coordinator::enqueueOf(*step("w", 10).requests[1]), 1);
  const v1::NegotiatedResponse first = leader.encode(step("w", 10));
  EXPECT_FALSE(first.cached());
  EXPECT_NE(first.cache_id(), 0u);
  ASSERT_TRUE(follower.decode(first).isOk());

  // The next step: the follower forwards rank 1's request, the leader
  // answers with the id alone, whatever the number of ranks.
  (void)follower.compact(1, coordinator::enqueueOf(*step("w", 20).requests[1]), 1);
  const v1::NegotiatedResponse second = leader.encode(step("w", 20));
  EXPECT_TRUE(second.cached());
  EXPECT_EQ(second.cache_id(), first.cache_id());
  EXPECT_EQ(second.requests_size(), 0);
  EXPECT_LE(second.ByteSizeLong(), 8u);
  auto decoded = follower.decode(second);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  EXPECT_EQ(decoded->name, "w");
  ASSERT_EQ(decoded->requests.size(), 2u);
  EXPECT_EQ(decoded->requests[1]->handle, 21u);  // this step's, of this node's rank
  EXPECT_EQ(decoded->requests[1]->offset, 4096u * 21);
  EXPECT_EQ(leader.traffic().cache_hits, 1u);
  EXPECT_EQ(follower.traffic().cache_hits, 2u);  // the forwarded request, and the response
}

// CUDA tensors are cached like the others: each step's allocation, offset,
// event slot and output are this node's own, taken from what it forwarded,
// never the step the cache learned them from.
TEST(CoordinationCodecTest, CudaRequestsRepeatByIdWithEachStepsDeviceReferences) {
  auto on_gpu = [](uint64_t step_number) {
    coordinator::Response r = step("g", step_number);
    for (auto& q : r.requests.mutableAll()) {
      q->type = r.type = v1::REDUCESCATTER;
      q->cuda = coordinator::CudaRef{step_number, 256 * step_number, static_cast<uint32_t>(step_number % 7)};
      q->cuda_output = coordinator::CudaRef{step_number + 1, 512 * step_number, 0};
      q->output_length = 16;
    }
    return r;
  };
  CoordinationCodec leader("job", 16), follower("job", 16);
  for (uint64_t s : {10, 20, 30}) {
    const v1::FollowerMessage::Request forwarded =
        follower.compact(1, coordinator::enqueueOf(*on_gpu(s).requests[1]), 1);
    EXPECT_EQ(forwarded.cache_id() != 0, s > 10);
    auto expanded = leader.expand(forwarded);
    ASSERT_TRUE(expanded.isOk()) << expanded.status().toString();
    EXPECT_TRUE(expanded->has_cuda());
    const v1::NegotiatedResponse sent = leader.encode(on_gpu(s));
    EXPECT_EQ(sent.cached(), s > 10);
    auto decoded = follower.decode(sent);
    ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
    const coordinator::Request& mine = *decoded->requests[1];
    ASSERT_TRUE(mine.cuda && mine.cuda_output);
    EXPECT_EQ(mine.cuda->buffer_id, s);
    EXPECT_EQ(mine.cuda->offset, 256 * s);
    EXPECT_EQ(mine.cuda->event_slot, s % 7);
    EXPECT_EQ(mine.cuda_output->buffer_id, s + 1);
    EXPECT_EQ(mine.cuda_output->offset, 512 * s);
    EXPECT_EQ(mine.output_length, 16u);
    EXPECT_TRUE(decoded->requests[0]->onCuda());  // the leader's rank: on a GPU, where is the leader's
  }
  EXPECT_EQ(leader.traffic().cache_hits, 4u);  // two requests and two responses by id
}

// The uniform form of a CUDA response (every rank asked alike, each with
// its own device references) keeps it on the GPU, with this node's.
TEST(CoordinationCodecTest, AUniformCudaResponseKeepsThisNodesDeviceReferences) {
  coordinator::Response r = step("u", 10);
  for (auto& q : r.requests.mutableAll()) q->cuda = coordinator::CudaRef{40 + static_cast<uint64_t>(q->rank), 64, 2};
  CoordinationCodec leader("job", 0), follower("job", 0);  // nothing cached: in full every time
  (void)follower.compact(1, coordinator::enqueueOf(*r.requests[1]), 1);
  const v1::NegotiatedResponse sent = leader.encode(r);
  EXPECT_TRUE(sent.uniform());
  auto decoded = follower.decode(sent);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  ASSERT_TRUE(decoded->requests[1]->cuda);
  EXPECT_EQ(decoded->requests[1]->cuda->buffer_id, 41u);
  EXPECT_TRUE(decoded->requests[0]->onCuda());
}

// A barrier carries no data: it travels without its requests, whatever
// the number of ranks, and each follower completes the ranks it forwarded.
// A commit barrier (elastic) still travels in full.
TEST(CoordinationCodecTest, ABarrierTravelsWithoutItsRanksAndTheFollowerCompletesItsOwn) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  coordinator::Response barrier;
  barrier.name = "barrier.7";
  barrier.type = v1::BARRIER;
  for (int rank = 0; rank < 1000; ++rank) {
    coordinator::Request q;
    q.rank = rank;
    q.name = barrier.name;
    q.type = v1::BARRIER;
    q.handle = 100 + rank;
    barrier.ranks.push_back(rank);
    barrier.requests.push_back(q);
  }
  // This follower holds ranks 11 and 5 (forwarded in that order).
  for (int rank : {11, 5}) (void)follower.compact(rank, coordinator::enqueueOf(*barrier.requests[rank]), 1);
  const v1::NegotiatedResponse sent = leader.encode(barrier);
  EXPECT_TRUE(sent.own_ranks());
  EXPECT_EQ(sent.requests_size(), 0);
  EXPECT_LE(sent.ByteSizeLong(), 20u);
  auto decoded = follower.decode(sent);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  EXPECT_EQ(decoded->type, v1::BARRIER);
  EXPECT_EQ(decoded->ranks, (std::vector<int>{5, 11}));
  ASSERT_EQ(decoded->requests.size(), 2u);
  EXPECT_EQ(decoded->requests[0]->handle, 105u);
  EXPECT_EQ(decoded->requests[1]->handle, 111u);
  // Another follower, none of whose ranks took part: an empty barrier.
  CoordinationCodec outsider("job", 16);
  auto none = outsider.decode(sent);
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->ranks.empty());

  for (auto& q : barrier.requests.mutableAll()) q->commit = true;
  EXPECT_FALSE(leader.encode(barrier).own_ranks());
}

TEST(CoordinationCodecTest, ACachedResponseWithPerRankHandlesFromAnOlderLeaderStillDecodes) {
  CoordinationCodec follower("job", 16);
  v1::NegotiatedResponse first = toProto(step("w", 10));
  first.set_cache_id(5);
  ASSERT_TRUE(follower.decode(first).isOk());
  v1::NegotiatedResponse older;
  older.set_cache_id(5);
  older.set_cached(true);
  for (int rank = 0; rank < 2; ++rank) {
    auto* r = older.add_requests();
    r->set_rank(rank);
    r->set_present(true);
    r->set_handle(30 + rank);
    r->set_offset(4096 * (30 + rank));
  }
  auto decoded = follower.decode(older);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  EXPECT_EQ(decoded->requests[1]->handle, 31u);
}

TEST(CoordinationCodecTest, FollowersRepeatedRequestGoesByIdAndTheLeaderExpandsIt) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  ASSERT_TRUE(follower.decode(leader.encode(step("w", 10))).isOk());
  const coordinator::Request next = step("w", 30).requests[1].value();
  const v1::FollowerMessage::Request compact = follower.compact(1, coordinator::enqueueOf(next), 7);
  EXPECT_EQ(compact.epoch(), 7u);
  EXPECT_NE(compact.cache_id(), 0u);
  EXPECT_FALSE(compact.has_enqueue());
  auto expanded = leader.expand(compact);
  ASSERT_TRUE(expanded.isOk()) << expanded.status().toString();
  EXPECT_EQ(expanded->name(), "w");
  EXPECT_EQ(expanded->handle(), 31u);
  EXPECT_EQ(expanded->offset(), 4096u * 31);

  // A request nobody cached goes in full.
  const coordinator::Request other = step("b", 40).requests[0].value();
  const v1::FollowerMessage::Request full = follower.compact(0, coordinator::enqueueOf(other), 7);
  EXPECT_EQ(full.cache_id(), 0u);
  EXPECT_EQ(full.enqueue().name(), "b");
  EXPECT_EQ(leader.expand(full)->name(), "b");
}

TEST(CoordinationCodecTest, UnknownIdsAreDataLossNamingTheJobAndId) {
  CoordinationCodec leader("job-x", 16), follower("job-x", 16);
  (void)leader.encode(step("w", 10));
  const v1::NegotiatedResponse cached = leader.encode(step("w", 20));  // the follower missed the first
  auto decoded = follower.decode(cached);
  ASSERT_FALSE(decoded.isOk());
  EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(decoded.status().message().find("job-x"), std::string::npos);
  EXPECT_NE(decoded.status().message().find("unknown cached response " + std::to_string(cached.cache_id())),
            std::string::npos);

  v1::FollowerMessage::Request forged;
  forged.set_rank(5);  // a rank the cached response does not hold
  forged.set_cache_id(cached.cache_id());
  auto expanded = leader.expand(forged);
  ASSERT_FALSE(expanded.isOk());
  EXPECT_EQ(expanded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(expanded.status().message().find("of rank 5"), std::string::npos);
}

TEST(CoordinationCodecTest, ANodesRanksByOneIdAreOneRepeatSharingTheCachedResponse) {
  CoordinationCodec leader("job-r", 16);
  const v1::NegotiatedResponse first = leader.encode(step("w", 10));
  v1::FollowerMessage::Request both;
  both.set_rank(1);
  both.add_same_ranks(0);
  both.set_cache_id(first.cache_id());
  both.set_call(12);
  auto repeat = leader.expandRepeat(both);
  ASSERT_TRUE(repeat.isOk()) << repeat.status().toString();
  EXPECT_EQ(repeat->id, first.cache_id());
  EXPECT_EQ(repeat->ranks, (std::vector<int>{1, 0}));
  EXPECT_EQ(repeat->cached->name, "w");
  const coordinator::Request zero = repeat->request(1);
  EXPECT_EQ(zero.rank, 0);
  EXPECT_EQ(zero.call, 12u);
  EXPECT_EQ(zero.repeats, first.cache_id());
  EXPECT_EQ(leader.traffic().cache_hits, 2u);

  both.add_same_ranks(2);  // not in the cached response: the whole entry is refused
  auto forged = leader.expandRepeat(both);
  ASSERT_FALSE(forged.isOk());
  EXPECT_EQ(forged.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(forged.status().message().find("of rank 2"), std::string::npos);
}

// The leader knows only the cached handles of ranks that went by id: what
// it sends in full (an error for one rank; a response it could not send by
// id) gets this node's own handles, each rank's forgotten once answered.
TEST(CoordinationCodecTest, AResponseInFullGetsThisNodesHandlesRankByRank) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  ASSERT_TRUE(follower.decode(leader.encode(step("w", 10))).isOk());
  const coordinator::Response next = step("w", 30);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(follower.compact(rank, coordinator::enqueueOf(next.requests[rank].value()), 0).cache_id(), 0u);
  }
  coordinator::Response error;  // as CrossNode::sendError makes it, from the cached request
  error.name = "w";
  error.type = v1::ALLREDUCE;
  error.ranks = {1};
  error.requests.push_back(step("w", 10).requests[1]);
  error.status = deadlineExceeded("stalled");
  auto failed = follower.decode(toProto(error));
  ASSERT_TRUE(failed.isOk()) << failed.status().toString();
  EXPECT_EQ(failed->requests[0]->handle, 31u);
  EXPECT_EQ(failed->requests[0]->offset, 4096u * 31);

  auto rest = follower.decode(toProto(step("w", 10)));  // rank 0's still known, rank 1's forgotten
  ASSERT_TRUE(rest.isOk()) << rest.status().toString();
  EXPECT_EQ(rest->requests[0]->handle, 30u);
  EXPECT_EQ(rest->requests[1]->handle, 11u);
}

TEST(CoordinationCodecTest, ClearForgetsEveryIdForTheNextEpoch) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  const v1::NegotiatedResponse first = leader.encode(step("w", 10));
  const uint64_t id = first.cache_id();
  ASSERT_TRUE(follower.decode(first).isOk());
  ASSERT_TRUE(follower.cachedResponse(id).has_value());
  leader.clear();
  follower.clear();
  EXPECT_FALSE(follower.cachedResponse(id).has_value());
  EXPECT_EQ(follower.cachedId(step("w", 50).requests[0].value()), 0u);
  const v1::NegotiatedResponse again = leader.encode(step("w", 60));
  EXPECT_FALSE(again.cached());     // in full: a node that joins knows no id
  EXPECT_NE(again.cache_id(), id);  // ids are not reused
}

TEST(CoordinationCodecTest, CountsTraffic) {
  CoordinationCodec codec("job", 16);
  codec.countSent(100);
  codec.countSent(20);
  codec.countReceived(7);
  const CoordinationCodec::Traffic traffic = codec.traffic();
  EXPECT_EQ(traffic.bytes_sent, 120u);
  EXPECT_EQ(traffic.bytes_received, 7u);
  EXPECT_EQ(traffic.messages, 3u);
}

// A response whose ranks all asked alike travels as one request and the
// ranks' span: a job's first step does not grow with its ranks.
coordinator::Response wide(int ranks, uint64_t handle_base, int stride = 1) {
  coordinator::Response r;
  r.name = "grad";
  r.type = v1::ALLREDUCE;
  for (int i = 0; i < ranks; ++i) {
    coordinator::Request q;
    q.rank = i * stride;
    q.name = "grad";
    q.type = v1::ALLREDUCE;
    q.dtype = v1::FLOAT32;
    q.shape = {1000};
    q.length = 4000;
    q.handle = handle_base + i;
    q.offset = 8192 * i;
    r.ranks.push_back(q.rank);
    r.requests.push_back(q);
  }
  return r;
}

TEST(CoordinationCodecTest, AUniformResponseTravelsAsOneRequestAndItsRanksSpan) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  const coordinator::Response whole = wide(8192, 100);
  (void)follower.compact(4000, coordinator::enqueueOf(*whole.requests[4000]), 1);
  const v1::NegotiatedResponse sent = leader.encode(whole);
  EXPECT_TRUE(sent.uniform());
  EXPECT_EQ(sent.requests_size(), 1);
  EXPECT_LE(sent.ByteSizeLong(), 128u);
  auto decoded = follower.decode(sent);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  ASSERT_EQ(decoded->ranks.size(), 8192u);
  EXPECT_EQ(decoded->ranks[8191], 8191);
  ASSERT_TRUE(decoded->requests[4000].has_value());
  EXPECT_EQ(decoded->requests[4000]->rank, 4000);
  EXPECT_EQ(decoded->requests[4000]->handle, 4100u);  // this node's rank: what it forwarded
  EXPECT_EQ(decoded->requests[4000]->offset, 8192u * 4000);
  EXPECT_EQ(decoded->requests[17]->length, 4000u);
  // The next step is the id alone, and decodes with this step's handle.
  const coordinator::Response next = wide(8192, 100000);
  (void)follower.compact(4000, coordinator::enqueueOf(*next.requests[4000]), 1);
  const v1::NegotiatedResponse again = leader.encode(next);
  EXPECT_TRUE(again.cached());
  auto cached = follower.decode(again);
  ASSERT_TRUE(cached.isOk()) << cached.status().toString();
  EXPECT_EQ(cached->requests[4000]->handle, 104000u);
}

TEST(CoordinationCodecTest, AUniformResponseOfScatteredRanksListsThem) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  const v1::NegotiatedResponse sent = leader.encode(wide(4, 1, /*stride=*/2));
  EXPECT_TRUE(sent.uniform());
  EXPECT_EQ(sent.uniform_ranks_size(), 4);
  auto decoded = follower.decode(sent);
  ASSERT_TRUE(decoded.isOk());
  EXPECT_EQ(decoded->ranks, (std::vector<int>{0, 2, 4, 6}));
}

TEST(CoordinationCodecTest, RanksThatAskedDifferentlyTravelInFull) {
  CoordinationCodec leader("job", 16);
  coordinator::Response mixed = wide(3, 1);
  mixed.requests.mutableAt(2)->prescale = 0.5;
  EXPECT_FALSE(leader.encode(mixed).uniform());
}

TEST(CoordinationCodecTest, AUniformResponseNamingTooManyRanksIsRefused) {
  CoordinationCodec leader("job", 16), follower("job", 16);
  v1::NegotiatedResponse sent = leader.encode(wide(2, 1));
  sent.set_uniform_count(1 << 30);
  auto decoded = follower.decode(sent);
  ASSERT_FALSE(decoded.isOk());
  EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace gradsync::peer
