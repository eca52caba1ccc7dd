// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/negotiator.h"
#include "daemon/coordinator/test_requests.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::coordinator {
namespace {

using ::testing::HasSubstr;

using testing::allreduce;

class NegotiatorTest : public ::testing::Test {
 protected:
  std::vector<Response> submit(Request r) {
    auto result = negotiator_.submit(std::move(r), now_);
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    return result.isOk() ? std::move(result).value() : std::vector<Response>{};
  }
  Clock::time_point now_ = Clock::now();
  Negotiator negotiator_{"job1", 3, {{0, 2}}};
};

TEST_F(NegotiatorTest, ReadyOnlyWhenEveryRankSubmitted) {
  EXPECT_TRUE(submit(allreduce(0, "w")).empty());
  EXPECT_TRUE(submit(allreduce(2, "w")).empty());
  auto ready = submit(allreduce(1, "w"));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].status.isOk());
  EXPECT_EQ(ready[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ready[0].requests[1]->handle, 101u);
  EXPECT_EQ(negotiator_.pendingCount(), 0u);
}

TEST_F(NegotiatorTest, DtypeMismatchNamesTensorRanksAndValues) {
  submit(allreduce(0, "w"));
  submit(allreduce(1, "w", v1::INT32));
  auto ready = submit(allreduce(2, "w"));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].status.code(), StatusCode::kFailedPrecondition);
  const std::string& m = ready[0].status.message();
  EXPECT_THAT(m, HasSubstr("job 'job1' tensor 'w'"));
  EXPECT_THAT(m, HasSubstr("dtype: float32 on ranks [0, 2]; int32 on ranks [1]"));
}

TEST_F(NegotiatorTest, AnAbandonedRequestFailsTheCollectiveNamingItsRank) {
  Request abandoned;
  abandoned.rank = 1;
  abandoned.name = "a";
  abandoned.type = v1::ALLREDUCE;  // no dtype, shape or data: nothing else is compared
  abandoned.abandoned = "ValueError: splits sum to 5";
  submit(allreduce(0, "a"));
  submit(abandoned);
  auto ready = submit(allreduce(2, "a"));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(ready[0].status.message(),
              HasSubstr("tensor 'a': rank 1 failed its allreduce at the call: ValueError: splits sum to 5"));
}

TEST_F(NegotiatorTest, DeviceMismatchNamesRanks) {
  Request on_gpu = allreduce(1, "d");
  on_gpu.cuda = coordinator::CudaRef{7, 0, 0};
  submit(allreduce(0, "d"));
  submit(on_gpu);
  auto ready = submit(allreduce(2, "d"));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_THAT(ready[0].status.message(), HasSubstr("device: cpu on ranks [0, 2]; cuda on ranks [1]"));
}

TEST_F(NegotiatorTest, ShapeOpRootAndScaleMismatches) {
  submit(allreduce(0, "s"));
  submit(allreduce(1, "s", v1::FLOAT32, {5}));
  auto ready = submit(allreduce(2, "s"));
  EXPECT_THAT(ready.at(0).status.message(), HasSubstr("shape: [4] on ranks [0, 2]; [5] on ranks [1]"));

  auto max_op = allreduce(1, "o");
  max_op.op = v1::MAX;
  submit(allreduce(0, "o"));
  submit(max_op);
  EXPECT_THAT(submit(allreduce(2, "o")).at(0).status.message(), HasSubstr("reduce op: sum on ranks [0, 2]; max"));

  auto scaled = allreduce(2, "p");
  scaled.prescale = 0.5;
  submit(allreduce(0, "p"));
  submit(allreduce(1, "p"));
  EXPECT_THAT(submit(scaled).at(0).status.message(), HasSubstr("scale factors"));

  for (int rank = 0; rank < 3; ++rank) {
    Request b = allreduce(rank, "b");
    b.type = v1::BROADCAST;
    b.root_rank = rank == 1 ? 2 : 0;
    auto ready_b = submit(b);
    if (rank == 2)
      EXPECT_THAT(ready_b.at(0).status.message(), HasSubstr("root rank: 0 on ranks [0, 2]; 2 on ranks [1]"));
  }
}

TEST_F(NegotiatorTest, CollectiveTypeMismatch) {
  submit(allreduce(0, "t"));
  auto gather = allreduce(1, "t");
  gather.type = v1::ALLGATHER;
  submit(gather);
  EXPECT_THAT(submit(allreduce(2, "t")).at(0).status.message(),
              HasSubstr("collective: allreduce on ranks [0, 2]; allgather on ranks [1]"));
}

TEST_F(NegotiatorTest, AllgatherAllowsDifferentFirstDimension) {
  for (int rank = 0; rank < 3; ++rank) {
    auto g = allreduce(rank, "g", v1::FLOAT32, {rank + 1, 3});
    g.type = v1::ALLGATHER;
    auto ready = submit(g);
    if (rank == 2) {
      ASSERT_EQ(ready.size(), 1u);
      EXPECT_TRUE(ready[0].status.isOk()) << ready[0].status.toString();
    }
  }
  for (int rank = 0; rank < 3; ++rank) {
    auto g = allreduce(rank, "h", v1::FLOAT32, {2, rank == 1 ? 4 : 3});
    g.type = v1::ALLGATHER;
    auto ready = submit(g);
    if (rank == 2) EXPECT_THAT(ready.at(0).status.message(), HasSubstr("shape beyond the first dimension"));
  }
}

TEST_F(NegotiatorTest, DuplicateNameInFlightIsRejectedAlone) {
  submit(allreduce(0, "d"));
  auto again = negotiator_.submit(allreduce(0, "d"), now_);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("rank 0 already has a collective of this name in flight"));
  submit(allreduce(1, "d"));
  EXPECT_EQ(submit(allreduce(2, "d")).size(), 1u);  // the original still completes
}

TEST_F(NegotiatorTest, ProcessSetMembershipAndMismatch) {
  auto in_set = allreduce(0, "ps");
  in_set.process_set_id = 1;
  EXPECT_TRUE(submit(in_set).empty());
  auto member2 = allreduce(2, "ps");
  member2.process_set_id = 1;
  auto ready = submit(member2);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].ranks, (std::vector<int>{0, 2}));

  auto outsider = allreduce(1, "x");
  outsider.process_set_id = 1;
  EXPECT_EQ(negotiator_.submit(outsider, now_).status().code(), StatusCode::kInvalidArgument);
  auto unknown = allreduce(1, "y");
  unknown.process_set_id = 7;
  EXPECT_THAT(negotiator_.submit(unknown, now_).status().message(), HasSubstr("unknown process set 7"));

  auto in_set_z = allreduce(0, "z");
  in_set_z.process_set_id = 1;
  submit(in_set_z);
  auto mismatch = submit(allreduce(2, "z"));
  ASSERT_EQ(mismatch.size(), 1u);
  EXPECT_THAT(mismatch[0].status.message(), HasSubstr("ranks disagree on process set"));
  EXPECT_EQ(mismatch[0].activeCount(), 2);
}

Request numbered(int rank, const std::string& name, uint64_t call, std::vector<int64_t> shape = {4}) {
  Request r = allreduce(rank, name, v1::FLOAT32, std::move(shape));
  r.call = call;
  return r;
}

TEST_F(NegotiatorTest, NumberedCallsOfOneNumberWithDifferentNamesFailAtOnceNamingBoth) {
  // A shape that differs makes a different name (the torch.distributed
  // backend names calls by their metadata): without call numbers the two
  // would wait for each other until the stall deadline.
  submit(numbered(0, "allreduce.f32.4.0", 7));
  auto failed = submit(numbered(1, "allreduce.f32.6.0", 7, {6}));
  ASSERT_EQ(failed.size(), 2u);
  for (const Response& response : failed) {
    EXPECT_EQ(response.status.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(response.status.message(),
                HasSubstr("job 'job1': the ranks made different calls on process set 0: rank 1 submitted allreduce "
                          "'allreduce.f32.6.0' (float32 [6], call 7) where rank 0 submitted allreduce "
                          "'allreduce.f32.4.0' (float32 [4], call 7) (the shapes differ)"));
  }
  EXPECT_EQ(failed[0].name, "allreduce.f32.4.0");
  EXPECT_EQ(failed[0].activeCount(), 1);
  EXPECT_EQ(failed[1].name, "allreduce.f32.6.0");
  EXPECT_EQ(negotiator_.pendingCount(), 0u);
  // The call number is free again: the job goes on.
  submit(numbered(0, "next", 8));
  submit(numbered(1, "next", 8));
  auto ready = submit(numbered(2, "next", 8));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].status.isOk());
}

TEST_F(NegotiatorTest, ANameUnderAnotherCallNumberFailsWithTheCollectiveItContradicts) {
  // Rank 1 skipped a call: its call 1 is rank 0's call 2.
  submit(numbered(0, "a", 1));
  submit(numbered(0, "b", 2));
  auto failed = submit(numbered(1, "b", 1));
  ASSERT_EQ(failed.size(), 2u);  // "b" (both ranks' requests) and "a", which held call 1
  EXPECT_EQ(failed[0].name, "b");
  EXPECT_EQ(failed[0].activeCount(), 2);
  EXPECT_EQ(failed[1].name, "a");
  EXPECT_THAT(failed[0].status.message(), HasSubstr("rank 1 submitted allreduce 'b' (float32 [4], call 1)"));
  EXPECT_EQ(negotiator_.pendingCount(), 0u);
}

TEST_F(NegotiatorTest, NumberedCallsInStepCompleteAndRepeatTheirNames) {
  for (uint64_t call = 1; call <= 3; ++call) {
    for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(submit(numbered(rank, "same", call)).empty());
    auto ready = submit(numbered(2, "same", call));
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_TRUE(ready[0].status.isOk()) << ready[0].status.toString();
  }
  // Calls of other process sets are numbered on their own.
  Request in_set = numbered(0, "s", 1);
  in_set.process_set_id = 1;
  submit(numbered(1, "t", 1));
  EXPECT_TRUE(submit(in_set).empty());
}

TEST_F(NegotiatorTest, JoinedRanksDoNotBlockAllreduceAndJoinCompletes) {
  Request join1 = allreduce(1, "");
  join1.type = v1::JOIN;
  EXPECT_TRUE(submit(join1).empty());
  submit(allreduce(0, "a"));
  auto ready = submit(allreduce(2, "a"));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].status.isOk());
  EXPECT_FALSE(ready[0].requests[1].has_value());
  EXPECT_EQ(ready[0].activeCount(), 2);

  // Pending allreduce waiting only on a rank that then joins becomes ready.
  submit(allreduce(0, "b"));
  Request join2 = allreduce(2, "");
  join2.type = v1::JOIN;
  auto on_join = submit(join2);
  ASSERT_EQ(on_join.size(), 1u);
  EXPECT_EQ(on_join[0].name, "b");

  Request join0 = allreduce(0, "");
  join0.type = v1::JOIN;
  auto done = submit(join0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].type, v1::JOIN);
  EXPECT_EQ(done[0].last_joined_rank, 0);
  EXPECT_FALSE(negotiator_.joined(1));  // flags reset after the join completes
}

TEST_F(NegotiatorTest, BroadcastWithJoinedRankFails) {
  Request join1 = allreduce(1, "");
  join1.type = v1::JOIN;
  submit(join1);
  for (int rank : {0, 2}) {
    Request b = allreduce(rank, "bc");
    b.type = v1::BROADCAST;
    auto ready = submit(b);
    if (rank == 2) EXPECT_THAT(ready.at(0).status.message(), HasSubstr("ranks [1] have joined"));
  }
}

TEST_F(NegotiatorTest, GroupsAreReleasedTogether) {
  for (int rank = 0; rank < 3; ++rank) {
    Request a = allreduce(rank, "g1");
    a.group_id = 9;
    a.group_size = 2;
    EXPECT_TRUE(submit(a).empty());
  }
  std::vector<Response> ready;
  for (int rank = 0; rank < 3; ++rank) {
    Request b = allreduce(rank, "g2");
    b.group_id = 9;
    b.group_size = 2;
    ready = submit(b);
  }
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].name, "g1");
  EXPECT_EQ(ready[1].name, "g2");
}

TEST_F(NegotiatorTest, StallsNameMissingRanksAndTakeRemoves) {
  submit(allreduce(0, "slow"));
  submit(allreduce(2, "slow"));
  EXPECT_TRUE(negotiator_.stalls(now_ + std::chrono::seconds(1), std::chrono::seconds(5)).empty());
  auto stalls = negotiator_.stalls(now_ + std::chrono::seconds(6), std::chrono::seconds(5));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].name, "slow");
  EXPECT_EQ(stalls[0].missing_ranks, (std::vector<int>{1}));
  EXPECT_EQ(stalls[0].submitted_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(negotiator_.take("slow").size(), 2u);
  EXPECT_EQ(negotiator_.pendingCount(), 0u);
}

TEST_F(NegotiatorTest, TakeAllReturnsEveryPendingRequest) {
  submit(allreduce(0, "a"));
  submit(allreduce(1, "b"));
  Request join = allreduce(2, "");
  join.type = v1::JOIN;
  submit(join);
  EXPECT_EQ(negotiator_.takeAll().size(), 3u);
  EXPECT_EQ(negotiator_.pendingCount(), 0u);
}

}  // namespace
}  // namespace gradsync::coordinator

namespace gradsync::coordinator {
namespace {

Request setChange(int rank, const std::string& name, CollectiveType type, std::vector<int> ranks, int target = 0) {
  Request r;
  r.rank = rank;
  r.handle = 500 + rank;
  r.name = name;
  r.type = type;
  r.set_ranks = std::move(ranks);
  r.target_set = target;
  return r;
}

class ProcessSetChangeTest : public NegotiatorTest {
 protected:
  // Every rank of the job submits the change; returns what became ready.
  std::vector<Response> everyRank(const std::string& name, CollectiveType type, std::vector<int> ranks,
                                  int target = 0) {
    std::vector<Response> ready;
    for (int rank = 0; rank < 3; ++rank) {
      for (auto& r : submit(setChange(rank, name, type, ranks, target))) ready.push_back(std::move(r));
    }
    return ready;
  }
};

TEST_F(ProcessSetChangeTest, AddNumbersSetsAfterTheStaticOnesAndNeverReusesIds) {
  auto ready = everyRank("c0", v1::PROCESS_SET_ADD, {1, 2});
  ASSERT_EQ(ready.size(), 1u);
  ASSERT_TRUE(ready[0].status.isOk()) << ready[0].status.toString();
  EXPECT_EQ(ready[0].changed_process_set, 2);  // static set 1 is {0, 2}
  EXPECT_EQ(ready[0].ranks, (std::vector<int>{0, 1, 2}));
  // The new set works at once: ready when its two members submitted.
  Request a = allreduce(1, "w");
  a.process_set_id = 2;
  Request b = allreduce(2, "w");
  b.process_set_id = 2;
  EXPECT_TRUE(submit(a).empty());
  ASSERT_EQ(submit(b).size(), 1u);

  ready = everyRank("c1", v1::PROCESS_SET_REMOVE, {}, 2);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].status.isOk());
  EXPECT_EQ(ready[0].changed_process_set, 2);
  EXPECT_FALSE(negotiator_.processSets().contains(2));
  ready = everyRank("c2", v1::PROCESS_SET_ADD, {1, 2});
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].changed_process_set, 3);
  // A request naming the removed id fails as an unknown set.
  a.name = "late";
  auto late = negotiator_.submit(a, now_);
  ASSERT_FALSE(late.isOk());
  EXPECT_THAT(late.status().message(), HasSubstr("unknown process set 2"));
}

TEST_F(ProcessSetChangeTest, DuplicateSetsAndDisagreementFailOnEveryRank) {
  auto ready = everyRank("c0", v1::PROCESS_SET_ADD, {0, 2});  // the static set
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].status.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(ready[0].status.message(), HasSubstr("ranks [0, 2] exists already: id 1"));

  submit(setChange(0, "c1", v1::PROCESS_SET_ADD, {0, 1}));
  submit(setChange(1, "c1", v1::PROCESS_SET_ADD, {0, 1}));
  ready = submit(setChange(2, "c1", v1::PROCESS_SET_ADD, {1, 2}));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_THAT(
      ready[0].status.message(),
      HasSubstr("ranks disagree on the ranks of the process set to add: [0, 1] on ranks [0, 1]; [1, 2] on ranks [2]"));
  EXPECT_EQ(negotiator_.processSets().count(), 2u);

  ready = everyRank("c2", v1::PROCESS_SET_REMOVE, {}, 7);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_THAT(ready[0].status.message(), HasSubstr("there is no process set 7"));
}

TEST_F(ProcessSetChangeTest, RemovingASetFailsItsWorkInFlightNamingTheRemoval) {
  Request waiting = allreduce(0, "w");
  waiting.process_set_id = 1;  // {0, 2}: rank 2 never submits
  EXPECT_TRUE(submit(waiting).empty());
  Request other = allreduce(1, "elsewhere");  // the global set: untouched
  EXPECT_TRUE(submit(other).empty());
  auto ready = everyRank("c0", v1::PROCESS_SET_REMOVE, {}, 1);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_TRUE(ready[0].status.isOk());
  EXPECT_EQ(ready[0].type, v1::PROCESS_SET_REMOVE);
  EXPECT_EQ(ready[1].name, "w");
  EXPECT_EQ(ready[1].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(ready[1].status.message(),
              HasSubstr("process set 1 [0, 2] was removed (by 'c0') while this collective waited for ranks [2]"));
  ASSERT_TRUE(ready[1].requests[0].has_value());
  EXPECT_EQ(negotiator_.pendingCount(), 1u);  // "elsewhere"
}

TEST_F(ProcessSetChangeTest, AFollowerAppliesTheLeadersIds) {
  Negotiator follower("job1", 3, {{0, 2}});
  Response added;
  added.type = v1::PROCESS_SET_ADD;
  added.ranks = {0, 1, 2};
  added.requests.emplace_back(setChange(0, "c0", v1::PROCESS_SET_ADD, {0, 1}));
  added.changed_process_set = 5;
  ASSERT_TRUE(follower.applyLeaderChange(added).isOk());
  EXPECT_EQ(*follower.processSets().find(5), (std::vector<int>{0, 1}));
  Response removed = added;
  removed.type = v1::PROCESS_SET_REMOVE;
  ASSERT_TRUE(follower.applyLeaderChange(removed).isOk());
  EXPECT_FALSE(follower.processSets().contains(5));
}

// Requests that all repeat one cached response (Request::repeats, set by the
// leader from its cache) are not checked again; any other mix is.
TEST_F(NegotiatorTest, RequestsRepeatingOneCachedResponseSkipTheSecondCheck) {
  std::vector<Response> trusted;
  for (int rank = 0; rank < 3; ++rank) {
    Request r = allreduce(rank, "w", v1::FLOAT32, {4 + rank});  // (shapes that would disagree)
    r.repeats = 7;
    trusted = submit(std::move(r));
  }
  // (Only the leader's cache sets `repeats`, for requests it already checked:
  // the negotiator trusts it, which the disagreeing shapes here show.)
  ASSERT_EQ(trusted.size(), 1u);
  EXPECT_TRUE(trusted[0].status.isOk());
  for (int rank = 0; rank < 3; ++rank) {
    Request r = allreduce(rank, "v", v1::FLOAT32, {4 + rank});
    r.repeats = rank == 2 ? 8 : 7;  // another cached response
    auto ready = submit(std::move(r));
    if (rank < 2) continue;
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_THAT(ready[0].status.message(), HasSubstr("shape"));
  }
  for (int rank = 0; rank < 3; ++rank) {
    Request r = allreduce(rank, "u", v1::FLOAT32, {4 + rank});
    r.repeats = rank == 1 ? 0 : 7;  // one not known to repeat it
    auto ready = submit(std::move(r));
    if (rank < 2) continue;
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_FALSE(ready[0].status.isOk());
  }
}

TEST_F(NegotiatorTest, RepeatedCachedRequestsReadyTogetherAndOk) {
  std::vector<Response> ready;
  for (int rank = 0; rank < 3; ++rank) {
    Request r = allreduce(rank, "w");
    r.repeats = 7;
    ready = submit(std::move(r));
  }
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].status.isOk());
  EXPECT_EQ(ready[0].requests[2]->handle, 102u);
}

// A cached response of the whole job (3 ranks) and ranks repeating it.
class RepeatTest : public NegotiatorTest {
 protected:
  static std::shared_ptr<const Response> cached(const std::string& name) {
    auto response = std::make_shared<Response>();
    response->name = name;
    response->type = v1::ALLREDUCE;
    response->ranks = {0, 1, 2};
    for (int rank = 0; rank < 3; ++rank) response->requests.push_back(allreduce(rank, name));
    return response;
  }
  static Repeat repeat(std::shared_ptr<const Response> cached, std::vector<int> ranks, uint64_t call = 0) {
    return Repeat{std::move(cached), 7, std::move(ranks), call};
  }
  Negotiator::Repeated submitRepeat(const Repeat& r) { return negotiator_.submit(r, now_); }
};

TEST_F(RepeatTest, RanksRepeatingACachedResponseShareItsRequestsBesideTheGivenOnes) {
  auto w = cached("w");
  Request own = allreduce(0, "w");
  own.handle = 555;  // this node's rank: its own handle this step
  own.repeats = 7;
  EXPECT_TRUE(submit(own).empty());
  auto out = submitRepeat(repeat(w, {2, 1}));
  EXPECT_TRUE(out.refused.empty());
  ASSERT_EQ(out.ready.size(), 1u);
  const Response& ready = out.ready[0];
  EXPECT_TRUE(ready.status.isOk());
  EXPECT_EQ(ready.repeatedId(), 7u);
  EXPECT_EQ(ready.requests[0]->handle, 555u);
  EXPECT_EQ(ready.requests[1]->handle, 101u);        // the cached one's (used only where rank 1 runs)
  EXPECT_EQ(&*ready.requests[2], &*w->requests[2]);  // shared, not copied
  EXPECT_EQ(negotiator_.pendingCount(), 0u);
}

TEST_F(RepeatTest, AGivenRequestOfOtherMetadataMakesTheResponseCheckedInFull) {
  submitRepeat(repeat(cached("w"), {1, 2}));
  Request other = allreduce(0, "w", v1::INT32);  // repeats nothing
  auto ready = submit(other);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].repeatedId(), 0u);
  EXPECT_THAT(ready[0].status.message(), HasSubstr("dtype: int32 on ranks [0]; float32 on ranks [1, 2]"));
  EXPECT_EQ(ready[0].requests[1]->repeats, 7u);
}

TEST_F(RepeatTest, ARankAlreadyInFlightIsRefusedAloneAndTheOthersCount) {
  auto w = cached("w");
  submitRepeat(repeat(w, {1}));
  auto out = submitRepeat(repeat(w, {1, 2}));
  ASSERT_EQ(out.refused.size(), 1u);
  EXPECT_EQ(out.refused[0].first.rank, 1);
  EXPECT_EQ(out.refused[0].second.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(out.ready.empty());
  auto ready = submit(allreduce(0, "w"));
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].status.isOk());
}

TEST_F(RepeatTest, AnotherCallNumberFailsTheCollectiveNamingBothCalls) {
  Request first = allreduce(0, "w");
  first.call = 3;
  submit(first);
  auto out = submitRepeat(repeat(cached("w"), {1, 2}, /*call=*/4));
  ASSERT_FALSE(out.ready.empty());
  EXPECT_THAT(out.ready[0].status.message(), HasSubstr("the ranks made different calls"));
  EXPECT_THAT(out.ready[0].status.message(), HasSubstr("call 4"));
}

TEST_F(RepeatTest, StallsTakeAndJoinSeeMarkedRanks) {
  submitRepeat(repeat(cached("w"), {2}, /*call=*/9));
  auto stalls = negotiator_.stalls(now_ + std::chrono::seconds(5), std::chrono::seconds(1));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].submitted_ranks, (std::vector<int>{2}));
  EXPECT_EQ(stalls[0].missing_ranks, (std::vector<int>{0, 1}));
  auto taken = negotiator_.take("w");
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].rank, 2);
  EXPECT_EQ(taken[0].call, 9u);
  EXPECT_EQ(taken[0].name, "w");

  // A joined rank leaves its slot empty: the response is built in full.
  submitRepeat(repeat(cached("v"), {1, 2}));
  Request join;
  join.rank = 0;
  join.name = "join";
  join.type = v1::JOIN;
  auto ready = submit(join);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].name, "v");
  EXPECT_FALSE(ready[0].requests[0].has_value());
  EXPECT_EQ(ready[0].activeCount(), 2);
}

// Past a few dozen requests given in full (a first step: every rank's), an
// entry keeps them in a slot each; marks and takes see them the same.
TEST(NegotiatorDenseTest, ManyGivenRequestsBesideMarksMakeTheSameResponse) {
  constexpr int kRanks = 100;
  Negotiator negotiator("job1", kRanks, {});
  const auto now = Clock::now();
  auto cached = std::make_shared<Response>();
  cached->name = "w";
  cached->type = v1::ALLREDUCE;
  for (int rank = 0; rank < kRanks; ++rank) {
    cached->ranks.push_back(rank);
    cached->requests.push_back(allreduce(rank, "w"));
  }
  for (int rank = 0; rank < 90; ++rank) {
    Request r = allreduce(rank, "w");
    r.handle = 1000 + rank;
    ASSERT_TRUE(negotiator.submit(r, now).isOk());
    ASSERT_TRUE(negotiator.submit(allreduce(rank, "v"), now).isOk());
  }
  std::vector<int> rest;
  for (int rank = 90; rank < kRanks; ++rank) rest.push_back(rank);
  auto out = negotiator.submit(Repeat{cached, 7, rest, 0}, now);
  ASSERT_EQ(out.ready.size(), 1u);
  const Response& ready = out.ready[0];
  EXPECT_TRUE(ready.status.isOk()) << ready.status.toString();
  EXPECT_EQ(ready.activeCount(), kRanks);
  EXPECT_EQ(ready.requests[89]->handle, 1089u);
  EXPECT_EQ(ready.requests[95]->rank, 95);
  EXPECT_EQ(ready.requests[95]->repeats, 7u);

  auto taken = negotiator.take("v");
  ASSERT_EQ(taken.size(), 90u);
  EXPECT_EQ(taken[89].rank, 89);
}

}  // namespace
}  // namespace gradsync::coordinator
