// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/enqueue_validation.h"

#include "daemon/coordinator/request_wire.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>

#include "daemon/gpu/fake_gpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::HasSubstr;

class EnqueueValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UniqueFd fd(::memfd_create("arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
    ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
    auto arena = handoff::ShmArena::map(std::move(fd), 1 << 20);
    ASSERT_TRUE(arena.isOk());
    arena_ = std::move(arena).value();
    context_.rank = 1;
    context_.job_size = 4;
    context_.process_sets = std::make_shared<coordinator::ProcessSetTable>(4, std::vector<std::vector<int>>{{1, 2}});
    context_.arena = arena_.get();
  }
  v1::Enqueue allreduce(uint64_t offset = 0) {
    v1::Enqueue e;
    e.set_handle(7);
    e.set_name("grad");
    e.set_type(v1::ALLREDUCE);
    e.set_dtype(v1::FLOAT32);
    e.add_shape(2);
    e.add_shape(8);
    e.set_op(v1::SUM);
    e.set_offset(offset);
    e.set_length(64);
    return e;
  }
  Status check(const v1::Enqueue& e) { return validateEnqueue(e, context_).status(); }

  std::unique_ptr<handoff::ShmArena> arena_;
  EnqueueContext context_;
};

TEST_F(EnqueueValidationTest, AcceptsWellFormedAllreduce) {
  auto r = validateEnqueue(allreduce(4032), context_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->prescale, 1.0);  // 0 on the wire means 1
  EXPECT_EQ(r->shape, (std::vector<int64_t>{2, 8}));
}

TEST_F(EnqueueValidationTest, AnAbandonedRequestCarriesNoDataAndIsBounded) {
  v1::Enqueue e;
  e.set_handle(3);
  e.set_name("w");
  e.set_type(v1::ALLREDUCE);
  e.set_offset(1ull << 60);  // ignored: no data
  e.set_length(12345);
  e.set_abandoned("ValueError: bad splits");
  auto r = validateEnqueue(e, context_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->abandoned, "ValueError: bad splits");
  EXPECT_EQ(r->length, 0u);
  EXPECT_EQ(r->offset, 0u);
  e.set_abandoned(std::string(1025, 'x'));
  EXPECT_THAT(check(e).message(), HasSubstr("abandon reason longer than 1024 bytes"));
  e.set_abandoned("x");
  e.set_type(v1::JOIN);
  EXPECT_THAT(check(e).message(), HasSubstr("only a collective can be abandoned"));
  e.set_type(v1::ALLREDUCE);
  e.set_process_set_id(7);
  EXPECT_THAT(check(e).message(), HasSubstr("unknown process set"));
}

TEST_F(EnqueueValidationTest, RangeOutsideArenaIsOutOfRange) {
  EXPECT_EQ(check(allreduce(4033)).code(), StatusCode::kOutOfRange);
  auto huge = allreduce(UINT64_MAX - 8);
  EXPECT_EQ(check(huge).code(), StatusCode::kOutOfRange);
  EXPECT_THAT(check(huge).message(), HasSubstr("outside the rank's arena of 4096 bytes"));
}

TEST_F(EnqueueValidationTest, LengthMustMatchShapeAndDtype) {
  auto e = allreduce();
  e.set_length(63);
  EXPECT_THAT(check(e).message(), HasSubstr("does not match shape [2, 8] of float32 (64 bytes)"));
  e = allreduce();
  e.set_shape(0, -1);
  EXPECT_EQ(check(e).code(), StatusCode::kInvalidArgument);
  e = allreduce();
  e.set_shape(0, int64_t{1} << 40);
  e.set_shape(1, int64_t{1} << 40);  // product overflows
  EXPECT_THAT(check(e).message(), HasSubstr("invalid shape"));
}

TEST_F(EnqueueValidationTest, RejectsBadEnumsOpsAndNames) {
  auto e = allreduce();
  e.set_dtype(static_cast<v1::DataType>(99));
  EXPECT_THAT(check(e).message(), HasSubstr("unknown dtype 99"));
  e = allreduce();
  e.set_dtype(v1::BOOL);
  e.set_length(16);
  EXPECT_THAT(check(e).message(), HasSubstr("reduce op sum is not allowed on bool"));
  e = allreduce();
  e.set_type(static_cast<v1::CollectiveType>(42));
  EXPECT_THAT(check(e).message(), HasSubstr("unknown collective type 42"));
  e = allreduce();
  e.set_name("");
  EXPECT_THAT(check(e).message(), HasSubstr("without a name"));
  e = allreduce();
  e.set_name(std::string(300, 'x'));
  EXPECT_THAT(check(e).message(), HasSubstr("limit 256"));
  e = allreduce();
  e.set_prescale(std::nan(""));
  EXPECT_THAT(check(e).message(), HasSubstr("finite"));
}

TEST_F(EnqueueValidationTest, ProcessSetRootAndGroupChecks) {
  auto e = allreduce();
  e.set_process_set_id(2);
  EXPECT_THAT(check(e).message(), HasSubstr("unknown process set 2"));
  e = allreduce();
  e.set_type(v1::BROADCAST);
  e.set_root_rank(4);
  EXPECT_THAT(check(e).message(), HasSubstr("root rank 4 outside [0, 4)"));
  e = allreduce();
  e.set_group_id(3);
  EXPECT_THAT(check(e).message(), HasSubstr("group id and group size"));
}

TEST_F(EnqueueValidationTest, AlltoallSplits) {
  auto e = allreduce();
  e.set_type(v1::ALLTOALL);
  auto r = validateEnqueue(e, context_);
  ASSERT_FALSE(r.isOk());   // dim0 = 2 not divisible by 4
  e.set_process_set_id(1);  // set of 2 ranks: even split 1/1
  r = validateEnqueue(e, context_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->splits, (std::vector<int64_t>{1, 1}));
  e.add_splits(2);
  e.add_splits(1);
  EXPECT_THAT(check(e).message(), HasSubstr("splits sum to 3 but dim 0 is 2"));
  e.clear_splits();
  e.add_splits(2);
  EXPECT_THAT(check(e).message(), HasSubstr("1 alltoall splits for a process set of 2"));
}

TEST_F(EnqueueValidationTest, BarrierNeedsNoData) {
  v1::Enqueue e;
  e.set_type(v1::BARRIER);
  e.set_offset(1 << 30);  // ignored
  auto r = validateEnqueue(e, context_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->name, "barrier");
  EXPECT_EQ(r->length, 0u);
}

TEST_F(EnqueueValidationTest, ProcessSetChangesAreWholeJobCollectivesWithValidRanks) {
  v1::Enqueue e;
  e.set_handle(3);
  e.set_name("process_set.change.0");
  e.set_type(v1::PROCESS_SET_ADD);
  e.add_process_set_ranks(0);
  e.add_process_set_ranks(3);
  e.set_offset(1 << 30);  // no data: ignored
  auto r = validateEnqueue(e, context_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->set_ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(r->length, 0u);
  e.set_process_set_id(1);
  EXPECT_THAT(check(e).message(), HasSubstr("every rank of the job"));
  e.set_process_set_id(0);
  e.add_process_set_ranks(4);
  EXPECT_THAT(check(e).message(), HasSubstr("rank 4 outside [0, 4)"));
  e.clear_process_set_ranks();
  e.add_process_set_ranks(2);
  e.add_process_set_ranks(1);
  EXPECT_THAT(check(e).message(), HasSubstr("not strictly increasing"));
  e.clear_process_set_ranks();
  EXPECT_THAT(check(e).message(), HasSubstr("at least one rank"));

  e.set_type(v1::PROCESS_SET_REMOVE);
  EXPECT_THAT(check(e).message(), HasSubstr("global process set (id 0) cannot be removed"));
  e.set_target_process_set(1);
  EXPECT_TRUE(check(e).isOk());
  e.add_process_set_ranks(1);
  EXPECT_THAT(check(e).message(), HasSubstr("only a process set add carries"));
  e.clear_process_set_ranks();
  e.set_name("");
  EXPECT_THAT(check(e).message(), HasSubstr("without a name"));
}

TEST_F(EnqueueValidationTest, CudaTensorOnADaemonWithoutGpus) {
  auto e = allreduce();
  e.mutable_cuda()->set_buffer_id(1);
  context_.gpus_present = false;
  context_.no_gpu_reason = "gradsyncd on host n1 has no GPU (no CUDA driver (cudaErrorInsufficientDriver, 35))";
  Status status = check(e);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'grad' of rank 1: is a CUDA tensor, but gradsyncd on host n1 has no "
                                          "GPU (no CUDA driver"));
}

TEST_F(EnqueueValidationTest, CudaTensorsAreCheckedAgainstTheRanksExports) {
  gpu::FakeGpuBackend backend;
  v1::CudaAttach attach;
  attach.set_device_uuid("GPU-1");
  for (int i = 0; i < 2; ++i) attach.add_ready_events(std::string(gpu::kIpcHandleBytes, 'e'));
  auto client = gpu::ClientGpu::attach(&backend, 0, "GPU-1", attach, "rank 1");
  ASSERT_TRUE(client.isOk());
  v1::CudaBufferExport exported;
  exported.set_buffer_id(9);
  exported.set_bytes(128);
  exported.set_ipc_handle(std::string(gpu::kIpcHandleBytes, 'm'));
  exported.set_device_uuid("GPU-1");
  ASSERT_TRUE((*client)->addBuffer(exported).isOk());
  context_.gpus_present = true;
  auto e = allreduce();  // 64 bytes
  e.mutable_cuda()->set_buffer_id(9);
  e.mutable_cuda()->set_offset(64);
  e.mutable_cuda()->set_event_slot(1);
  EXPECT_THAT(check(e).message(), HasSubstr("has not attached its GPU"));
  context_.gpu = client->get();
  auto r = validateEnqueue(e, context_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  ASSERT_TRUE(r->onCuda());
  EXPECT_EQ(r->cuda->buffer_id, 9u);
  EXPECT_EQ(r->cuda->offset, 64u);
  EXPECT_EQ(r->cuda->event_slot, 1u);
  EXPECT_EQ(coordinator::enqueueOf(*r).cuda().offset(), 64u);  // survives forwarding
  e.mutable_cuda()->set_offset(66);
  EXPECT_THAT(check(e).message(), HasSubstr("not aligned to its 4-byte elements"));
  e.mutable_cuda()->set_offset(68);
  EXPECT_EQ(check(e).code(), StatusCode::kOutOfRange);
  e.mutable_cuda()->set_offset(0);
  e.mutable_cuda()->set_event_slot(2);
  EXPECT_THAT(check(e).message(), HasSubstr("event slot 2 outside [0, 2)"));
  e.mutable_cuda()->set_event_slot(gpu::kNoEventSlot);  // "no events" is only for tensors without memory
  EXPECT_THAT(check(e).message(), HasSubstr("a CUDA tensor with memory needs an event slot"));
  e.mutable_cuda()->set_event_slot(0);
  e.mutable_cuda()->set_buffer_id(10);
  EXPECT_THAT(check(e).message(), HasSubstr("never exported"));
  // Collectives with an output of their own name it, checked likewise.
  e.mutable_cuda()->set_buffer_id(9);
  e.set_type(v1::ALLGATHER);
  EXPECT_THAT(check(e).message(), HasSubstr("a CUDA allgather needs its output buffer"));
  e.mutable_cuda_output()->set_buffer_id(9);
  e.mutable_cuda_output()->set_offset(64);
  e.set_output_length(64);
  auto gather = validateEnqueue(e, context_);
  ASSERT_TRUE(gather.isOk()) << gather.status().toString();
  EXPECT_EQ(gather->cuda_output->offset, 64u);
  EXPECT_EQ(gather->output_length, 64u);
  EXPECT_EQ(coordinator::enqueueOf(*gather).output_length(), 64u);
  e.set_output_length(65);
  EXPECT_EQ(check(e).code(), StatusCode::kOutOfRange);
  e.set_type(v1::ALLREDUCE);
  e.set_output_length(64);
  EXPECT_THAT(check(e).message(), HasSubstr("only allgather, alltoall and reducescatter take an output buffer"));
  e.clear_cuda();
  EXPECT_THAT(check(e).message(), HasSubstr("a CUDA output for a CPU tensor"));
}

}  // namespace
}  // namespace gradsync::server
