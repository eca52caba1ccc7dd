// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/batch_parts.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;

v1::NegotiatedResponse response(const std::string& name, int ranks) {
  v1::NegotiatedResponse r;
  r.set_name(name);
  r.set_type(v1::ALLREDUCE);
  r.set_cache_id(7);
  for (int rank = 0; rank < ranks; ++rank) {
    auto* request = r.add_requests();
    request->set_rank(rank);
    request->set_present(true);
    request->mutable_enqueue()->set_name(name);
    request->mutable_enqueue()->set_handle(1000 + rank);
    request->mutable_enqueue()->add_shape(4);
  }
  return r;
}

v1::Batch batch(std::vector<v1::NegotiatedResponse> responses) {
  v1::Batch b;
  b.set_sequence(42);
  b.set_epoch(3);
  b.set_fusion_threshold_bytes(1 << 20);
  for (auto& r : responses) *b.add_responses() = std::move(r);
  return b;
}

v1::Batch reassemble(const std::vector<v1::Batch>& parts) {
  BatchAssembler assembler;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto added = assembler.add(parts[i]);
    EXPECT_TRUE(added.isOk()) << added.status().toString();
    if (i + 1 < parts.size()) {
      EXPECT_FALSE(added->has_value()) << "part " << i;
    } else if (added.isOk() && added->has_value()) {
      return **added;
    }
  }
  ADD_FAILURE() << "the last part did not complete the batch";
  return v1::Batch();
}

TEST(BatchParts, ABatchWithinTheBudgetIsOnePart) {
  const v1::Batch whole = batch({response("a", 2), response("b", 2)});
  auto parts = splitBatch(whole, 4096);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].SerializeAsString(), whole.SerializeAsString());
  EXPECT_EQ(reassemble(parts).SerializeAsString(), whole.SerializeAsString());
}

TEST(BatchParts, ManyResponsesGoInPartsWithinTheBudgetAndComeBackWhole) {
  std::vector<v1::NegotiatedResponse> responses;
  for (int i = 0; i < 300; ++i) responses.push_back(response("t" + std::to_string(i), 3));
  const v1::Batch whole = batch(responses);
  auto parts = splitBatch(whole, 4096);
  ASSERT_GT(parts.size(), 5u);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_LE(parts[i].ByteSizeLong(), 4096u) << "part " << i;
    EXPECT_EQ(parts[i].more(), i + 1 < parts.size());
    EXPECT_EQ(parts[i].sequence(), 42u);
    EXPECT_EQ(parts[i].epoch(), 3u);
  }
  EXPECT_EQ(reassemble(parts).SerializeAsString(), whole.SerializeAsString());
}

TEST(BatchParts, AResponseOfMoreRanksThanAPartHoldsIsCutBetweenItsRequests) {
  // 20,000 ranks: one response of ~500 KiB against a budget of 16 KiB.
  const v1::Batch whole = batch({response("small", 2), response("wide", 20000), response("after", 2)});
  auto parts = splitBatch(whole, 16384);
  ASSERT_GT(parts.size(), 20u);
  int continued = 0;
  for (const auto& part : parts) {
    EXPECT_LE(part.ByteSizeLong(), 16384u);
    for (const auto& r : part.responses()) continued += r.continued();
  }
  EXPECT_EQ(continued, static_cast<int>(parts.size()) - 2);  // every part but the first and last ends in a cut
  EXPECT_EQ(reassemble(parts).SerializeAsString(), whole.SerializeAsString());
}

TEST(BatchParts, APartOfAnotherBatchIsRefused) {
  std::vector<v1::NegotiatedResponse> responses;
  for (int i = 0; i < 100; ++i) responses.push_back(response("t" + std::to_string(i), 3));
  auto parts = splitBatch(batch(responses), 2048);
  ASSERT_GT(parts.size(), 2u);
  BatchAssembler assembler;
  ASSERT_TRUE(assembler.add(parts[0]).isOk());
  v1::Batch stray = parts[1];
  stray.set_sequence(43);
  auto refused = assembler.add(stray);
  ASSERT_FALSE(refused.isOk());
  EXPECT_THAT(refused.status().message(), HasSubstr("a part of batch 43 (epoch 3) came while batch 42"));
  // After the refusal (or a lost stream) the assembler starts afresh.
  auto single = assembler.add(batch({response("x", 1)}));
  ASSERT_TRUE(single.isOk());
  EXPECT_TRUE(single->has_value());
}

TEST(BatchParts, ABatchEndingInsideAResponseIsRefused) {
  auto parts = splitBatch(batch({response("wide", 2000)}), 4096);
  ASSERT_GT(parts.size(), 2u);
  BatchAssembler assembler;
  ASSERT_TRUE(assembler.add(parts[0]).isOk());
  v1::Batch last = parts[1];
  last.set_more(false);
  auto refused = assembler.add(last);
  ASSERT_FALSE(refused.isOk());
  EXPECT_THAT(refused.status().message(), HasSubstr("ended inside a response"));
}

}  // namespace
}  // namespace gradsync::peer
