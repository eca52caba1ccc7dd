// SPDX-License-Identifier: Apache-2.0
// JobGpus alone, on host memory (FakeDeviceOps, FakeGpuBackend): members
// resolved by GPU, their ready events awaited and done events recorded in
// order, and the job's streams and staging buffer.
#include "daemon/executor/job_gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "daemon/executor/fake_rank_access.h"
#include "daemon/gpu/fake_device_ops.h"

namespace gradsync::executor {
namespace {

using coordinator::Request;
using ::testing::HasSubstr;

class JobGpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status made = attachFakeRanks(3, &backend_, &access_, &ranks_);
    ASSERT_TRUE(made.isOk()) << made.toString();
  }
  // Rank `rank`'s allreduce of 4 floats at `offset`, with its event slot.
  static Request request(int rank, uint64_t offset) {
    Request q;
    q.rank = rank;
    q.name = "t";
    q.type = v1::ALLREDUCE;
    q.dtype = v1::FLOAT32;
    q.shape = {4};
    q.length = 16;
    q.cuda = coordinator::CudaRef{kBufferId, offset, static_cast<uint32_t>(rank)};
    return q;
  }
  static Response response(std::vector<Request> requests) {
    Response r;
    r.name = "t";
    r.type = v1::ALLREDUCE;
    for (auto& q : requests) {
      r.ranks.push_back(q.rank);
      r.requests.emplace_back(std::move(q));
    }
    return r;
  }
  int logged(const std::string& entry) const {
    auto it = std::find(ops_.log.begin(), ops_.log.end(), entry);
    return it == ops_.log.end() ? -1 : static_cast<int>(it - ops_.log.begin());
  }
  std::string ready(int rank) const { return gpu::FakeDeviceOps::name(ranks_[rank].gpu->readyEvent(rank)); }
  std::string done(int rank) const { return gpu::FakeDeviceOps::name(ranks_[rank].gpu->doneEvent(rank)); }

  gpu::FakeGpuBackend backend_;
  gpu::FakeDeviceOps ops_;
  FakeAccess access_;
  std::vector<FakeRank> ranks_;
  JobGpus gpus_{&ops_};
};

TEST_F(JobGpusTest, TheLocalMembersOfAResponseLieAtTheirRanksMemoryOnTheJobsStream) {
  access_.multi = true;
  access_.local = {0, 2};  // rank 1 is another node's
  const Response r = response({request(0, 64), request(1, 0), request(2, 128)});
  auto groups = gpus_.resolveByDevice(r, access_);
  ASSERT_TRUE(groups.isOk()) << groups.status().toString();
  ASSERT_EQ(groups->size(), 1u);
  const JobGpus::Members& group = groups->front();
  EXPECT_EQ(group.device, 0);
  ASSERT_EQ(group.list.size(), 2u);
  EXPECT_EQ(group.list[0].rank, 0);
  EXPECT_EQ(group.list[0].data, ranks_[0].at(64));
  EXPECT_EQ(group.list[1].rank, 2);
  EXPECT_EQ(group.list[1].data, ranks_[2].at(128));
  auto stream = gpus_.streamFor(0);
  ASSERT_TRUE(stream.isOk());
  EXPECT_EQ(group.stream, *stream) << "one stream per GPU for the job";
  EXPECT_THAT(JobGpus::memberIndices(r, group), ::testing::ElementsAre(0, 2));
  EXPECT_THAT(JobGpus::localBytes(group, {0, 2}, {10, 20, 30}), ::testing::ElementsAre(10, 30));
}

TEST_F(JobGpusTest, ARankWithoutMemoryGoesWithTheFirstGroupAndOneWhoseGpuIsGoneIsNamed) {
  Request empty = request(1, 0);
  empty.length = 0;
  empty.shape = {0};
  empty.cuda = coordinator::CudaRef{gpu::kNoBuffer, 0, gpu::kNoEventSlot};
  auto groups = gpus_.resolveByDevice(response({request(0, 0), empty}), access_);
  ASSERT_TRUE(groups.isOk()) << groups.status().toString();
  ASSERT_EQ(groups->size(), 1u);
  ASSERT_EQ(groups->front().list.size(), 2u);
  EXPECT_EQ(groups->front().list[1].slot, gpu::kNoEventSlot);

  access_.gpus.erase(2);  // rank 2 disconnected
  auto gone = gpus_.resolveByDevice(response({request(0, 0), request(2, 0)}), access_);
  ASSERT_FALSE(gone.isOk());
  EXPECT_THAT(gone.status().message(), HasSubstr("rank 2 has no GPU attached any more"));
}

TEST_F(JobGpusTest, ReadyEventsAreAwaitedBeforeDoneEventsAreRecordedForTheGroupsAwaited) {
  auto groups = gpus_.resolveByDevice(response({request(0, 0), request(1, 0)}), access_);
  ASSERT_TRUE(groups.isOk());
  size_t waited = 0;
  ASSERT_TRUE(gpus_.waitReadyOnGpus(*groups, &waited).isOk());
  EXPECT_EQ(waited, 1u);
  const Status status = gpus_.recordDoneOnGpus(*groups, waited, internalError("the reduction failed"));
  EXPECT_EQ(status.code(), StatusCode::kInternal) << "the first failure is kept";
  for (int r : {0, 1}) {
    ASSERT_GE(logged("wait " + ready(r)), 0) << "rank " << r;
    ASSERT_GE(logged("record " + done(r)), 0) << "rank " << r << ": recorded after a failure all the same";
    EXPECT_LT(logged("wait " + ready(r)), logged("record " + done(r)));
  }
  ops_.log.clear();
  EXPECT_TRUE(gpus_.recordDoneOnGpus(*groups, 0, okStatus()).isOk());
  EXPECT_EQ(logged("record " + done(0)), -1) << "nothing was awaited: nothing is recorded";
}

TEST_F(JobGpusTest, AReadyEventOfARankThatDisconnectsEndsTheWaitNamingIt) {
  ops_.never_done.insert(ranks_[1].gpu->readyEvent(1));
  auto groups = gpus_.resolveByDevice(response({request(0, 0), request(1, 0)}), access_);
  ASSERT_TRUE(groups.isOk());
  std::thread disconnect([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks_[1].gpu->detach();
  });
  const Status waited = gpus_.waitReady(groups->front());
  disconnect.join();
  EXPECT_EQ(waited.code(), StatusCode::kUnavailable);
  EXPECT_THAT(waited.message(), HasSubstr("rank 1 disconnected before the GPU work producing its tensor finished"));
}

TEST_F(JobGpusTest, TheStagingBufferGrowsAndKeepsItsBytesAndEachGpuHasOneFusionBuffer) {
  uint8_t* small = gpus_.staging(16);
  small[0] = 42;
  uint8_t* large = gpus_.staging(1 << 20);
  EXPECT_EQ(large[0], 42);
  EXPECT_EQ(gpus_.staging(8), large) << "never shrinks";
  auto fusion = gpus_.fusionFor(0);
  ASSERT_TRUE(fusion.isOk());
  EXPECT_EQ(*gpus_.fusionFor(0), *fusion);
  EXPECT_TRUE(gpus_.drainStaging({}, okStatus()).isOk());
  EXPECT_EQ(gpus_.drainStaging({}, cancelled("x")).code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace gradsync::executor
