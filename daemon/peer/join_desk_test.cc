// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/join_desk.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

v1::NodeInfo node(const std::string& address, std::vector<int> ranks) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  for (int r : ranks) n.add_ranks(r);
  return n;
}

v1::JoinJobRequest request(const v1::NodeInfo& n, const std::string& token = "t", int size = 4,
                           std::vector<std::vector<int>> sets = {{0, 2}}) {
  v1::JoinJobRequest r;
  r.set_job_id("j");
  r.set_token(token);
  r.set_size(size);
  for (const auto& set : sets) {
    auto* spec = r.add_process_sets();
    for (int rank : set) spec->add_ranks(rank);
  }
  *r.mutable_node() = n;
  return r;
}

JoinDesk desk() { return JoinDesk("j", "t", 4, {{0, 2}}, std::chrono::seconds(30)); }

TEST(JoinDeskTest, JoinsAreRetriedUntilTheLeaderOpensAndRefusedWhenTheyDisagree) {
  JoinDesk d = desk();
  EXPECT_EQ(d.check(request(node("b:1", {2, 3}))).code(), StatusCode::kNotFound);
  EXPECT_EQ(d.add(node("b:1", {2, 3})).status().code(), StatusCode::kNotFound);
  d.open(node("a:1", {0, 1}));
  EXPECT_TRUE(d.check(request(node("b:1", {2, 3}))).isOk());
  EXPECT_EQ(d.check(request(node("b:1", {2, 3}), "other")).code(), StatusCode::kUnauthenticated);
  const Status size = d.check(request(node("b:1", {2, 3}), "t", 6));
  EXPECT_EQ(size.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(size.message(), HasSubstr("disagrees on the job's size or process sets"));
  EXPECT_EQ(d.check(request(node("b:1", {2, 3}), "t", 4, {{0, 1}})).code(), StatusCode::kFailedPrecondition);
}

TEST(JoinDeskTest, TheNodeThatCompletesTheJobGetsTheRingOnceAndTheWaitingAnswersFollow) {
  JoinDesk d = desk();
  d.open(node("a:1", {0}));
  auto first = d.add(node("b:1", {1}));
  ASSERT_TRUE(first.isOk());
  EXPECT_FALSE(first->has_value());
  int answered = 0;
  d.wait([&](StatusOr<v1::JoinJobResponse> r) { answered += r.isOk() ? 1 : 100; }, CrossClock::now());
  EXPECT_TRUE(d.waiting());
  EXPECT_EQ(d.missingRanks(), (std::vector<int>{2, 3}));
  EXPECT_EQ(d.add(node("c:1", {1, 2})).status().code(), StatusCode::kAlreadyExists);  // rank 1 is b's
  auto last = d.add(node("c:1", {2, 3}));
  ASSERT_TRUE(last.isOk());
  ASSERT_TRUE(last->has_value());
  ASSERT_EQ((*last)->size(), 3u);
  EXPECT_EQ((**last)[0].peer_address(), "a:1");
  EXPECT_EQ((**last)[2].cross_rank(), 2);
  EXPECT_THAT(d.missingRanks(), IsEmpty());

  EXPECT_THAT(d.due(CrossClock::now(), std::nullopt, false), IsEmpty());  // not formed, not due
  v1::JoinJobResponse formed;
  formed.set_epoch(1);
  for (auto& [answer, result] : d.due(CrossClock::now(), formed, false)) answer(std::move(result));
  EXPECT_EQ(answered, 1);
  EXPECT_FALSE(d.waiting());
}

TEST(JoinDeskTest, AWaitingCallEndsAtItsDeadlineNamingTheMissingRanksOrWhenTheJobStops) {
  JoinDesk d = JoinDesk("j", "t", 4, {}, std::chrono::seconds(5));
  d.open(node("a:1", {0}));
  const auto start = CrossClock::now();
  std::vector<Status> answers;
  const auto record = [&](StatusOr<v1::JoinJobResponse> r) { answers.push_back(r.status()); };
  d.wait(record, start);
  d.wait(record, start + std::chrono::seconds(3));
  EXPECT_THAT(d.due(start + std::chrono::seconds(4), std::nullopt, false), IsEmpty());
  for (auto& [answer, result] : d.due(start + std::chrono::seconds(6), std::nullopt, false)) answer(std::move(result));
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(answers[0].message(), HasSubstr("ranks [1, 2, 3] never joined"));
  for (auto& [answer, result] : d.due(start + std::chrono::seconds(6), std::nullopt, true)) answer(std::move(result));
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].code(), StatusCode::kUnavailable);
  EXPECT_THAT(answers[1].message(), HasSubstr("stopped"));
  EXPECT_FALSE(d.waiting());
}

}  // namespace
}  // namespace gradsync::peer
