// SPDX-License-Identifier: Apache-2.0
// The GPU executor's logic on host memory (FakeDeviceOps runs the CPU
// kernels, FakeGpuBackend "maps" clients' buffers to host pointers): every
// collective's layout and offsets, output checks, the staged path across
// nodes, and the order of event waits and records.
#include "daemon/executor/gpu_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/fake_rank_access.h"
#include "daemon/gpu/fake_device_ops.h"
#include "daemon/gpu/fake_gpu_backend.h"

namespace gradsync::executor {
namespace {

using ::testing::HasSubstr;

class GpuExecutorTest : public ::testing::Test {
 protected:
  void makeRanks(int n) {
    const Status made = attachFakeRanks(n, &backend_, &access_, &ranks_);
    ASSERT_TRUE(made.isOk()) << made.toString();
  }
  // A request of `rank` for `bytes` at `offset`, its output (if any) at `output_offset`.
  Request request(int rank, const std::string& name, CollectiveType type, DataType dtype, std::vector<int64_t> shape,
                  uint64_t offset, ReduceOp op = v1::SUM) {
    Request q;
    q.rank = rank;
    q.name = name;
    q.type = type;
    q.dtype = dtype;
    q.shape = std::move(shape);
    q.op = op;
    q.length = static_cast<uint64_t>(elementCount(q.shape, int64_t{1} << 40)) * elementSize(dtype);
    q.cuda = coordinator::CudaRef{kBufferId, offset, static_cast<uint32_t>(rank % 8)};
    return q;
  }
  static void withOutput(Request* q, uint64_t offset, uint64_t length) {
    q->cuda_output = coordinator::CudaRef{kBufferId, offset, 0};
    q->output_length = length;
  }
  static Response response(const std::string& name, std::vector<Request> requests) {
    Response r;
    r.name = name;
    r.type = requests.front().type;
    for (auto& q : requests) {
      r.ranks.push_back(q.rank);
      r.requests.emplace_back(std::move(q));
    }
    return r;
  }
  std::vector<ResponseResult> run(std::vector<Response> responses) {
    fusion::FusedResponse fused;
    fused.responses = std::move(responses);
    return executor_.run(fused, access_);
  }
  // Position of `entry` in the device log (-1: absent).
  int logged(const std::string& entry) const {
    auto it = std::find(ops_.log.begin(), ops_.log.end(), entry);
    return it == ops_.log.end() ? -1 : static_cast<int>(it - ops_.log.begin());
  }
  std::string ready(int rank, uint32_t slot) const {
    return gpu::FakeDeviceOps::name(ranks_[rank].gpu->readyEvent(slot));
  }
  std::string done(int rank, uint32_t slot) const {
    return gpu::FakeDeviceOps::name(ranks_[rank].gpu->doneEvent(slot));
  }

  gpu::FakeGpuBackend backend_;
  gpu::FakeDeviceOps ops_;
  GpuExecutor executor_{&ops_, nullptr};
  FakeAccess access_;
  std::vector<FakeRank> ranks_;
};

template <typename T>
void fill(FakeRank& rank, uint64_t offset, size_t count, std::function<T(size_t)> value) {
  auto* p = reinterpret_cast<T*>(rank.at(offset));
  for (size_t i = 0; i < count; ++i) p[i] = value(i);
}

template <typename T>
T element(FakeRank& rank, uint64_t offset, size_t i) {
  return reinterpret_cast<T*>(rank.at(offset))[i];
}

TEST_F(GpuExecutorTest, AllreduceOfEveryDtypeAndOpMatchesTheCpuKernels) {
  makeRanks(3);
  const std::vector<DataType> dtypes = {v1::UINT8,   v1::INT8,     v1::UINT16,  v1::INT16,   v1::INT32, v1::INT64,
                                        v1::FLOAT16, v1::BFLOAT16, v1::FLOAT32, v1::FLOAT64, v1::BOOL};
  const std::vector<ReduceOp> ops = {v1::SUM, v1::AVERAGE, v1::MIN, v1::MAX, v1::PRODUCT};
  const size_t count = 37;
  for (DataType dtype : dtypes) {
    for (ReduceOp op : ops) {
      if (!reduceOpAllowed(dtype, op)) continue;
      const size_t bytes = count * elementSize(dtype);
      // Inputs: deterministic bytes per rank; reference on copies.
      std::vector<std::vector<uint8_t>> inputs(3, std::vector<uint8_t>(bytes));
      for (int r = 0; r < 3; ++r) {
        for (size_t b = 0; b < bytes; ++b) inputs[r][b] = static_cast<uint8_t>((b * 7 + r * 13) % 5);
        std::memcpy(ranks_[r].at(128), inputs[r].data(), bytes);
      }
      std::vector<uint8_t> expected(bytes);
      const void* in[3] = {inputs[0].data(), inputs[1].data(), inputs[2].data()};
      void* out[1] = {expected.data()};
      reduce::ReduceArgs args;
      args.dtype = dtype;
      args.op = op;
      args.inputs = in;
      args.num_inputs = 3;
      args.outputs = out;
      args.num_outputs = 1;
      args.average_divisor = 3;
      ASSERT_TRUE(reduce::validateReduceArgs(args).isOk());
      reduce::reduceRange(args, 0, count);
      const std::string name = "t." + dataTypeName(dtype) + "." + reduceOpName(op);
      std::vector<Request> requests;
      for (int r = 0; r < 3; ++r) requests.push_back(request(r, name, v1::ALLREDUCE, dtype, {int64_t(count)}, 128, op));
      auto results = run({response(name, requests)});
      ASSERT_TRUE(results[0].status.isOk()) << name << ": " << results[0].status.toString();
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(std::memcmp(ranks_[r].at(128), expected.data(), bytes), 0) << name << " rank " << r;
      }
    }
  }
}

TEST_F(GpuExecutorTest, EveryRanksReadyEventIsAwaitedBeforeItsTensorIsTouchedAndDoneRecordedAfter) {
  makeRanks(2);
  fill<float>(ranks_[0], 0, 4, [](size_t) { return 1.0f; });
  fill<float>(ranks_[1], 0, 4, [](size_t) { return 2.0f; });
  auto results = run({response("w", {request(0, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0),
                                     request(1, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0)})});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  EXPECT_EQ(element<float>(ranks_[1], 0, 3), 3.0f);
  const int reduce_at = logged("reduce");
  for (int r = 0; r < 2; ++r) {
    const uint32_t slot = static_cast<uint32_t>(r % 8);
    ASSERT_GE(logged("wait " + ready(r, slot)), 0) << r;
    EXPECT_LT(logged("wait " + ready(r, slot)), reduce_at) << r;
    EXPECT_GT(logged("record " + done(r, slot)), reduce_at) << r;
  }
}

TEST_F(GpuExecutorTest, PrescalePostscaleAndAverageOverTheWholeSet) {
  makeRanks(2);
  fill<float>(ranks_[0], 64, 8, [](size_t i) { return float(i); });
  fill<float>(ranks_[1], 64, 8, [](size_t i) { return float(2 * i); });
  Request a = request(0, "s", v1::ALLREDUCE, v1::FLOAT32, {8}, 64, v1::AVERAGE);
  Request b = request(1, "s", v1::ALLREDUCE, v1::FLOAT32, {8}, 64, v1::AVERAGE);
  a.prescale = b.prescale = 2.0;
  a.postscale = b.postscale = 0.5;
  Response r = response("s", {a, b});
  r.ranks.push_back(2);  // a joined rank: no data, still counted by AVERAGE
  r.requests.emplace_back();
  auto results = run({r});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  for (size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(element<float>(ranks_[0], 64, i), (2 * i + 4 * i) / 3.0f * 0.5f);
}

TEST_F(GpuExecutorTest, BroadcastCopiesTheRootsTensorToEveryRank) {
  makeRanks(3);
  for (int r = 0; r < 3; ++r) fill<int64_t>(ranks_[r], 256, 5, [r](size_t i) { return int64_t(r * 100 + i); });
  std::vector<Request> requests;
  for (int r = 0; r < 3; ++r) {
    requests.push_back(request(r, "b", v1::BROADCAST, v1::INT64, {5}, 256));
    requests.back().root_rank = 1;
  }
  auto results = run({response("b", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(element<int64_t>(ranks_[r], 256, 4), 104) << r;
}

TEST_F(GpuExecutorTest, RaggedAllgatherIntoCallerSizedOutputs) {
  makeRanks(3);
  std::vector<Request> requests;
  for (int r = 0; r < 3; ++r) {
    fill<int32_t>(ranks_[r], 0, (r + 1) * 2, [r](size_t i) { return int32_t(r * 10 + i); });
    requests.push_back(request(r, "g", v1::ALLGATHER, v1::INT32, {r + 1, 2}, 0));
    withOutput(&requests.back(), 4096, 6 * 2 * 4);
  }
  auto results = run({response("g", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  const std::vector<int32_t> want = {0, 1, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25};
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(element<int32_t>(ranks_[r], 4096, i), want[i]) << r << " " << i;
    EXPECT_EQ(results[0].members[r].output_shape, (std::vector<int64_t>{6, 2}));
  }
}

TEST_F(GpuExecutorTest, RanksWithoutElementsTakePart) {
  makeRanks(3);
  // Allgather where rank 1 has no rows: it still receives everyone's.
  std::vector<Request> requests;
  for (int r = 0; r < 3; ++r) {
    const int rows = r == 1 ? 0 : 2;
    fill<float>(ranks_[r], 0, rows, [r](size_t i) { return float(r * 10 + i); });
    requests.push_back(request(r, "g0", v1::ALLGATHER, v1::FLOAT32, {rows}, 0));
    if (rows == 0) requests.back().cuda = coordinator::CudaRef{gpu::kNoBuffer, 0, requests.back().cuda->event_slot};
    withOutput(&requests.back(), 4096, 4 * 4);
  }
  auto results = run({response("g0", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(element<float>(ranks_[r], 4096, 0), 0.0f) << r;
    EXPECT_EQ(element<float>(ranks_[r], 4096, 2), 20.0f) << r;
  }
  // An allreduce of no elements, from ranks that send no events.
  std::vector<Request> empty;
  for (int r = 0; r < 3; ++r) {
    empty.push_back(request(r, "e", v1::ALLREDUCE, v1::FLOAT32, {0}, 0));
    empty.back().cuda = coordinator::CudaRef{gpu::kNoBuffer, 0, gpu::kNoEventSlot};
  }
  access_.gpus.erase(2);  // even one that never attached a GPU
  const size_t logged_before = ops_.log.size();
  results = run({response("e", empty)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  EXPECT_EQ(ops_.log.size(), logged_before);  // nothing queued
}

TEST_F(GpuExecutorTest, AlltoallWithSplits) {
  makeRanks(2);
  // Rank r sends r + 1 rows to each rank: rows are r*100 + row index.
  std::vector<Request> requests;
  for (int r = 0; r < 2; ++r) {
    fill<float>(ranks_[r], 0, 2 * (r + 1), [r](size_t i) { return float(r * 100 + i); });
    requests.push_back(request(r, "a", v1::ALLTOALL, v1::FLOAT32, {2 * (r + 1)}, 0));
    requests.back().splits = {r + 1, r + 1};
    withOutput(&requests.back(), 8192, (1 + 2) * 4);
  }
  auto results = run({response("a", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  // Rank 0 gets row 0 of rank 0, then rows 0-1 of rank 1; rank 1 gets row 1 of rank 0, rows 2-3 of rank 1.
  EXPECT_EQ(element<float>(ranks_[0], 8192, 0), 0.0f);
  EXPECT_EQ(element<float>(ranks_[0], 8192, 2), 101.0f);
  EXPECT_EQ(element<float>(ranks_[1], 8192, 0), 1.0f);
  EXPECT_EQ(element<float>(ranks_[1], 8192, 2), 103.0f);
  EXPECT_EQ(results[0].members[1].received_splits, (std::vector<int64_t>{1, 2}));
}

TEST_F(GpuExecutorTest, ReducescatterGivesTheFirstRanksTheExtraRow) {
  makeRanks(2);
  std::vector<Request> requests;
  for (int r = 0; r < 2; ++r) {
    fill<double>(ranks_[r], 0, 5 * 2, [r](size_t i) { return double(i + r); });
    requests.push_back(request(r, "rs", v1::REDUCESCATTER, v1::FLOAT64, {5, 2}, 0));
    withOutput(&requests.back(), 1024, (r == 0 ? 3 : 2) * 2 * 8);
  }
  auto results = run({response("rs", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  EXPECT_EQ(element<double>(ranks_[0], 1024, 0), 1.0);   // row 0: 0+1
  EXPECT_EQ(element<double>(ranks_[0], 1024, 5), 11.0);  // row 2, col 1: 5+6
  EXPECT_EQ(element<double>(ranks_[1], 1024, 0), 13.0);  // row 3: 6+7
  EXPECT_EQ(results[0].members[1].output_shape, (std::vector<int64_t>{2, 2}));
}

TEST_F(GpuExecutorTest, AnOutputOfTheWrongSizeIsRefusedNamingTheRank) {
  makeRanks(2);
  std::vector<Request> requests;
  for (int r = 0; r < 2; ++r) {
    requests.push_back(request(r, "g", v1::ALLGATHER, v1::FLOAT32, {4}, 0));
    withOutput(&requests.back(), 4096, r == 0 ? 32 : 16);
  }
  auto results = run({response("g", requests)});
  EXPECT_EQ(results[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(results[0].status.message(), HasSubstr("rank 1 gave an output of 16 bytes; the result has 32"));
}

TEST_F(GpuExecutorTest, ARankThatLeftFailsTheCollectiveNamingIt) {
  makeRanks(2);
  access_.gpus.erase(1);
  auto results = run({response("w", {request(0, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0),
                                     request(1, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0)})});
  EXPECT_EQ(results[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[0].status.message(), HasSubstr("rank 1 has no GPU attached"));
}

// A rank that died with its ready event recorded behind work that will
// never run: the executor waits on the host, sees the rank go, and fails the
// collective without touching a tensor or recording a done event.
TEST_F(GpuExecutorTest, ARankThatDiesBeforeItsReadyEventFailsTheCollectiveAndNothingIsQueued) {
  makeRanks(2);
  ops_.never_done.insert(ranks_[1].gpu->readyEvent(1));
  std::thread disconnect([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks_[1].gpu->detach();
  });
  const auto start = std::chrono::steady_clock::now();
  auto results = run({response("w", {request(0, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0),
                                     request(1, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0)})});
  disconnect.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(results[0].status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(results[0].status.message(), HasSubstr("rank 1 disconnected before the GPU work"));
  EXPECT_EQ(logged("reduce"), -1);
  EXPECT_EQ(logged("record " + done(0, 0)), -1);
}

// Across nodes without NCCL: local reduce, host staging, the ring (faked:
// another node adds its contribution), then every local rank's result.
TEST_F(GpuExecutorTest, StagedAllreduceAcrossNodesWithAFusedBucket) {
  makeRanks(2);
  access_.multi = true;
  access_.local = {0, 1};
  fill<float>(ranks_[0], 0, 4, [](size_t) { return 1.0f; });
  fill<float>(ranks_[1], 0, 4, [](size_t) { return 2.0f; });
  std::vector<float> seen;
  access_.cross_allreduce = [&](void* data, size_t count, DataType dtype, ReduceOp op) {
    EXPECT_EQ(op, v1::SUM);  // AVERAGE sums among the nodes, divides after
    auto* f = static_cast<float*>(data);
    seen.assign(f, f + count);
    for (size_t i = 0; i < count; ++i) f[i] += 10.0f;  // the other node (rank 2)
    return okStatus();
  };
  Request a0 = request(0, "a", v1::ALLREDUCE, v1::FLOAT32, {4}, 0, v1::AVERAGE);
  Request a1 = request(1, "a", v1::ALLREDUCE, v1::FLOAT32, {4}, 0, v1::AVERAGE);
  Request a2 = request(2, "a", v1::ALLREDUCE, v1::FLOAT32, {4}, 0, v1::AVERAGE);  // remote
  // A second tensor only the remote rank holds (a process set): identities here.
  Request b2 = request(2, "b", v1::ALLREDUCE, v1::FLOAT32, {2}, 0, v1::AVERAGE);
  auto results = run({response("a", {a0, a1, a2}), response("b", {b2})});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[0], 3.0f);  // 1 + 2 from the local ranks
  EXPECT_EQ(seen[4], 0.0f);  // identity of SUM for "b"
  for (int r = 0; r < 2; ++r) EXPECT_FLOAT_EQ(element<float>(ranks_[r], 0, 3), 13.0f / 3) << r;
}

// Across nodes, allgather and alltoall stage every rank's input in host
// memory for the ring's allgather (faked: node 1's rank 2 writes its range)
// or the pairwise exchange (faked: node 1 sends 20 + j for each rank j of
// node 0, and what node 0 sent it is kept).
class StagedGatherTest : public GpuExecutorTest {
 protected:
  void SetUp() override {
    makeRanks(2);
    access_.multi = true;
    access_.local = {0, 1};
    access_.cross_allgather = [&](uint8_t* buffer, const std::vector<std::vector<collective::Range>>& owned) {
      EXPECT_EQ(owned.size(), 2u);
      for (const auto& range : owned[1]) {
        auto* f = reinterpret_cast<float*>(buffer + range.offset);
        for (size_t i = 0; i < range.bytes / 4; ++i) f[i] = 20.0f + static_cast<float>(i);
      }
      return okStatus();
    };
    access_.cross_alltoall = [&](const uint8_t* send, const std::vector<collective::Range>& send_to, uint8_t* recv,
                                 const std::vector<collective::Range>& recv_from) {
      EXPECT_EQ(send_to.size(), 2u);
      EXPECT_EQ(send_to[0].bytes, 0u);  // nothing to itself
      sent_to_node1.assign(reinterpret_cast<const float*>(send + send_to[1].offset),
                           reinterpret_cast<const float*>(send + send_to[1].offset + send_to[1].bytes));
      auto* f = reinterpret_cast<float*>(recv + recv_from[1].offset);
      for (size_t j = 0; j < recv_from[1].bytes / 4; ++j) f[j] = 20.0f + static_cast<float>(j);
      return okStatus();
    };
  }
  std::vector<float> sent_to_node1;
};

TEST_F(StagedGatherTest, RaggedAllgatherWithARankOnAnotherNode) {
  fill<float>(ranks_[0], 0, 2, [](size_t i) { return 0.0f + i; });   // 1 row of 2
  fill<float>(ranks_[1], 0, 4, [](size_t i) { return 10.0f + i; });  // 2 rows of 2
  Request q0 = request(0, "g", v1::ALLGATHER, v1::FLOAT32, {1, 2}, 0);
  Request q1 = request(1, "g", v1::ALLGATHER, v1::FLOAT32, {2, 2}, 0);
  Request q2 = request(2, "g", v1::ALLGATHER, v1::FLOAT32, {3, 2}, 0);  // remote: 3 rows
  withOutput(&q0, 1024, 6 * 2 * 4);
  withOutput(&q1, 1024, 6 * 2 * 4);
  auto results = run({response("g", {q0, q1, q2})});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  const std::vector<float> expected = {0, 1, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25};
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(element<float>(ranks_[r], 1024, i), expected[i]) << r << i;
  }
  EXPECT_EQ(results[0].members[0].output_shape, (std::vector<int64_t>{6, 2}));
  EXPECT_LT(logged("wait " + ready(1, 1)), logged("record " + done(1, 1)));
}

TEST_F(StagedGatherTest, AlltoallWithSplitsAcrossNodes) {
  // Each rank sends splits [1, 1, 1] rows of 1 float: rank r's row j is r*10+j.
  for (int r = 0; r < 2; ++r) fill<float>(ranks_[r], 0, 3, [r](size_t j) { return r * 10.0f + j; });
  std::vector<Request> requests;
  for (int r = 0; r < 3; ++r) {
    requests.push_back(request(r, "a2a", v1::ALLTOALL, v1::FLOAT32, {3, 1}, 0));
    requests.back().splits = {1, 1, 1};
    if (r < 2) withOutput(&requests.back(), 2048, 3 * 4);
  }
  auto results = run({response("a2a", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  // Rank j receives row j of every rank; node 1's rank 2 holds 20, 21, 22.
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(element<float>(ranks_[j], 2048, 0), 0.0f + j);
    EXPECT_EQ(element<float>(ranks_[j], 2048, 1), 10.0f + j);
    EXPECT_EQ(element<float>(ranks_[j], 2048, 2), 20.0f + j);
  }
  // Node 1 got only its rank's rows, once: rank 0's row 2, rank 1's row 2.
  EXPECT_EQ(sent_to_node1, (std::vector<float>{2.0f, 12.0f}));
}

TEST_F(StagedGatherTest, ReducescatterAcrossNodesAveragesOverEveryRank) {
  // 3 rows of 2 among 3 ranks: one row each; rank 2 (remote) adds 30.
  for (int r = 0; r < 2; ++r) fill<float>(ranks_[r], 0, 6, [r](size_t i) { return r + 1.0f + i; });
  // The ring reduce-scatter: node 0 (ranks 0 and 1) owns rows 0 and 1,
  // node 1 (rank 2) row 2; the remote rank's 30 is added to node 0's part.
  access_.cross_reducescatter = [&](const void* input, void* data, DataType, ReduceOp op,
                                    const std::vector<std::vector<collective::ElementRange>>& owned) {
    EXPECT_EQ(op, v1::SUM);
    EXPECT_EQ(input, data);
    EXPECT_EQ(owned.size(), 2u);
    EXPECT_EQ(owned[0].size(), 2u);
    EXPECT_EQ(owned[0][0].begin, 0u);
    EXPECT_EQ(owned[1][0].begin, 4u);
    auto* f = static_cast<float*>(data);
    for (const auto& range : owned[0]) {
      for (size_t i = range.begin; i < range.begin + range.count; ++i) f[i] += 30.0f;
    }
    return okStatus();
  };
  std::vector<Request> requests;
  for (int r = 0; r < 3; ++r) {
    requests.push_back(request(r, "rs", v1::REDUCESCATTER, v1::FLOAT32, {3, 2}, 0, v1::AVERAGE));
    if (r < 2) withOutput(&requests.back(), 4096, 2 * 4);
  }
  auto results = run({response("rs", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < 2; ++i) {
      const size_t element_index = r * 2 + i;  // rank r's row
      const float sum = (1.0f + element_index) + (2.0f + element_index) + 30.0f;
      EXPECT_FLOAT_EQ(element<float>(ranks_[r], 4096, i), sum / 3) << r << " " << i;
    }
  }
}

TEST_F(GpuExecutorTest, StagedBroadcastFromARootOnAnotherNode) {
  makeRanks(2);
  access_.multi = true;
  access_.local = {0, 1};
  access_.cross_broadcast = [&](void* data, size_t bytes, int root) {
    EXPECT_EQ(root, 2);
    std::memset(data, 0x2a, bytes);
    return okStatus();
  };
  std::vector<Request> requests;
  for (int r = 0; r < 3; ++r) {
    requests.push_back(request(r, "bc", v1::BROADCAST, v1::UINT8, {16}, 512));
    requests.back().root_rank = 2;
  }
  auto results = run({response("bc", requests)});
  ASSERT_TRUE(results[0].status.isOk()) << results[0].status.toString();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(element<uint8_t>(ranks_[r], 512, 15), 0x2a) << r;
}

TEST_F(GpuExecutorTest, OneStreamPerJobAndDeviceReleasedWithTheExecutor) {
  makeRanks(2);
  {
    GpuExecutor executor(&ops_, nullptr);
    fusion::FusedResponse fused;
    fused.responses = {response("w", {request(0, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0),
                                      request(1, "w", v1::ALLREDUCE, v1::FLOAT32, {4}, 0)})};
    ASSERT_TRUE(executor.run(fused, access_)[0].status.isOk());
    ASSERT_TRUE(executor.run(fused, access_)[0].status.isOk());
    EXPECT_EQ(ops_.streams_made, 1);
  }
  EXPECT_EQ(ops_.streams_released, 1);
}

}  // namespace
}  // namespace gradsync::executor
