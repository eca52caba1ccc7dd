// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/done_messages.h"

#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

coordinator::Request request(int rank, uint64_t handle) {
  coordinator::Request r;
  r.rank = rank;
  r.handle = handle;
  r.name = "grad.w";
  return r;
}

coordinator::Response allgatherOf(std::vector<int> ranks) {
  coordinator::Response response;
  response.name = "grad.w";
  response.type = v1::ALLGATHER;
  response.ranks = ranks;
  for (int r : ranks) response.requests.push_back(request(r, 100 + r));
  response.last_joined_rank = 2;
  return response;
}

TEST(DoneMessagesTest, ARequestsFailureNamesTheJobAndTensorAndSaysWhetherItIsRetriable) {
  const auto ok = doneMessage("j", request(0, 7), okStatus());
  EXPECT_EQ(ok.done().handle(), 7u);
  EXPECT_EQ(ok.done().code(), 0);
  EXPECT_FALSE(ok.done().has_detail());

  const auto failed = doneMessage("j", request(0, 7), aborted("rank 1 left"), /*membership_changed=*/true);
  EXPECT_EQ(failed.done().code(), static_cast<int>(StatusCode::kAborted));
  EXPECT_EQ(failed.done().message(), "rank 1 left");
  EXPECT_EQ(failed.done().detail().job_id(), "j");
  EXPECT_EQ(failed.done().detail().tensor_name(), "grad.w");
  EXPECT_TRUE(failed.done().detail().membership_changed());
}

TEST(DoneMessagesTest, EachRequestOfARunResponseGetsItsOwnShapeAndSplits) {
  const auto response = allgatherOf({0, 1});
  executor::ResponseResult result;
  result.members.resize(2);
  result.members[0].output_shape = {6, 3};
  result.members[1].output_shape = {6, 3};
  result.members[1].received_splits = {2, 4};
  const auto second = responseDone("j", response, result, 1, /*retriable=*/true, /*epoch_changed=*/false);
  EXPECT_EQ(second.done().handle(), 101u);
  EXPECT_EQ(second.done().code(), 0);
  ASSERT_EQ(second.done().output_shape_size(), 2);
  EXPECT_EQ(second.done().output_shape(0), 6);
  ASSERT_EQ(second.done().received_splits_size(), 2);
  EXPECT_EQ(second.done().received_splits(1), 4);
  EXPECT_EQ(second.done().last_joined_rank(), 2);
  EXPECT_FALSE(second.done().has_detail());  // a success is never "retriable"
  EXPECT_FALSE(second.done().epoch_changed());
}

TEST(DoneMessagesTest, AFailedResponseNamesItsTensorAndRanks) {
  const auto response = allgatherOf({0, 3, 5});
  executor::ResponseResult result;
  result.status = aborted("node lost");  // no members: nothing ran
  const auto done = responseDone("j", response, result, 2, /*retriable=*/false, /*epoch_changed=*/false);
  EXPECT_EQ(done.done().handle(), 105u);
  EXPECT_EQ(done.done().detail().tensor_name(), "grad.w");
  ASSERT_EQ(done.done().detail().ranks_size(), 3);
  EXPECT_EQ(done.done().detail().ranks(1), 3);
  EXPECT_FALSE(done.done().detail().membership_changed());
  EXPECT_EQ(done.done().output_shape_size(), 0);
  EXPECT_TRUE(responseDone("j", response, result, 0, true, false).done().detail().membership_changed());
}

TEST(DoneMessagesTest, ACommitThatAdmittedJoinersAndANewProcessSetSaySo) {
  coordinator::Response barrier = allgatherOf({0, 1});
  barrier.type = v1::BARRIER;
  EXPECT_TRUE(responseDone("j", barrier, {}, 0, false, /*epoch_changed=*/true).done().epoch_changed());
  coordinator::Response add = allgatherOf({0, 1});
  add.type = v1::PROCESS_SET_ADD;
  add.changed_process_set = 4;
  EXPECT_EQ(responseDone("j", add, {}, 1, false, false).done().process_set_id(), 4);
}

TEST(DoneMessagesTest, ATuningSampleCarriesTheSettingsInMilliseconds) {
  autotune::TuningEvent event;
  event.settings.fusion_threshold_bytes = 8 << 20;
  event.settings.cycle_time = std::chrono::microseconds(2500);
  event.bytes_per_second = 1e9;
  event.phase = "chose";
  const auto sample = tuningSample(event).autotune_sample();
  EXPECT_EQ(sample.fusion_threshold_bytes(), 8u << 20);
  EXPECT_DOUBLE_EQ(sample.cycle_time_ms(), 2.5);
  EXPECT_DOUBLE_EQ(sample.bytes_per_second(), 1e9);
  EXPECT_EQ(sample.phase(), "chose");
}

}  // namespace
}  // namespace gradsync::server
