// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/request_batch.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

v1::FollowerMessage::Request byId(int rank, uint64_t id, uint64_t call = 7, uint64_t epoch = 1) {
  v1::FollowerMessage::Request r;
  r.set_rank(rank);
  r.set_cache_id(id);
  r.set_handle(100 + rank);
  r.set_call(call);
  r.set_epoch(epoch);
  return r;
}

v1::FollowerMessage::Request inFull(int rank, const std::string& name) {
  v1::FollowerMessage::Request r;
  r.set_rank(rank);
  r.mutable_enqueue()->set_name(name);
  return r;
}

// "rank[+same...]:id" per entry, or "rank:name" for one in full.
std::string describe(const v1::FollowerMessage& message) {
  std::string out;
  for (const auto& r : message.requests().requests()) {
    if (!out.empty()) out += " ";
    out += std::to_string(r.rank());
    for (int same : r.same_ranks()) out += "+" + std::to_string(same);
    out += ":" + (r.cache_id() != 0 ? std::to_string(r.cache_id()) : r.enqueue().name());
  }
  return out;
}

TEST(RequestBatchTest, ANodesRanksRepeatingOneCachedResponseTravelAsOneEntry) {
  RequestBatch batch;
  for (int rank = 4; rank < 8; ++rank) {
    batch.add(byId(rank, 11));
    batch.add(byId(rank, 12));
  }
  const size_t bytes = batch.bytes();
  const v1::FollowerMessage message = batch.take();
  EXPECT_EQ(describe(message), "4+5+6+7:11 4+5+6+7:12");
  EXPECT_EQ(message.requests().requests(0).handle(), 104u);  // the first rank's own fields stay
  EXPECT_LE(message.ByteSizeLong(), bytes + 8);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(describe(batch.take()), "");
}

TEST(RequestBatchTest, AnotherEpochOrCallIsAnEntryOfItsOwn) {
  RequestBatch batch;
  batch.add(byId(0, 11, /*call=*/7, /*epoch=*/1));
  batch.add(byId(1, 11, /*call=*/8, /*epoch=*/1));
  batch.add(byId(2, 11, /*call=*/7, /*epoch=*/2));
  batch.add(byId(3, 11, /*call=*/7, /*epoch=*/1));
  EXPECT_EQ(describe(batch.take()), "0+3:11 1:11 2:11");
}

TEST(RequestBatchTest, ARankWithALaterRequestDoesNotJumpBackOverIt) {
  RequestBatch batch;
  batch.add(byId(0, 11));
  batch.add(inFull(1, "barrier"));
  batch.add(byId(1, 11));  // after its barrier: a new entry
  batch.add(byId(2, 11));  // joins the newest entry of id 11
  batch.add(byId(0, 12));
  batch.add(byId(1, 12));
  EXPECT_EQ(describe(batch.take()), "0:11 1:barrier 1+2:11 0+1:12");
}

TEST(RequestBatchTest, RequestsInFullAreNeverJoined) {
  RequestBatch batch;
  batch.add(inFull(0, "x"));
  batch.add(inFull(1, "x"));
  EXPECT_EQ(describe(batch.take()), "0:x 1:x");
}

}  // namespace
}  // namespace gradsync::peer
