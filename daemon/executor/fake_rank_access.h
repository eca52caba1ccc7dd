// SPDX-License-Identifier: Apache-2.0
// For the GPU executor's tests: ranks whose "device" memory is host memory
// (FakeGpuBackend maps their buffers to host pointers), and the ranks and
// the data plane in one object whose answers the test sets.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/executor/rank_access.h"
#include "daemon/gpu/client_gpu.h"
#include "daemon/gpu/fake_gpu_backend.h"

namespace gradsync::executor {

constexpr uint64_t kBufferBytes = 1 << 16;
constexpr uint64_t kBufferId = 77;

// One rank: its "device" memory and its GPU state in the daemon.
struct FakeRank {
  std::vector<uint8_t> memory = std::vector<uint8_t>(kBufferBytes);
  std::shared_ptr<gpu::ClientGpu> gpu;
  uint8_t* at(uint64_t offset) { return memory.data() + offset; }
};

// The ranks and the data plane in one: what the test sets is what the executor sees.
class FakeAccess : public RankAccess, public DataPlane {
 public:
  const handoff::ShmArena* arena(int) override { return nullptr; }
  StatusOr<std::vector<uint8_t*>> requestOutputs(const Response&, const std::vector<uint64_t>&,
                                                 const std::vector<std::vector<int64_t>>&) override {
    return unimplemented("CUDA collectives never ask for outputs");
  }
  bool multiNode() const override { return multi; }
  bool isLocal(int rank) const override { return !multi || local.count(rank) > 0; }
  Status allreduce(const NodeSet&, void* data, size_t count, DataType dtype, ReduceOp op) override {
    return cross_allreduce(data, count, dtype, op);
  }
  Status broadcast(const NodeSet&, void* data, size_t bytes, int root) override {
    return cross_broadcast(data, bytes, root);
  }
  // Ranks 0 and 1 on node 0, rank 2 on node 1.
  int nodeOf(int rank) const override { return rank < 2 ? 0 : 1; }
  int nodeCount() const override { return multi ? 2 : 1; }
  Status allgather(const NodeSet&, uint8_t* buffer, const std::vector<std::vector<collective::Range>>& owned) override {
    return cross_allgather(buffer, owned);
  }
  Status reduceScatter(const NodeSet&, const void* input, void* data, DataType dtype, ReduceOp op,
                       const std::vector<std::vector<collective::ElementRange>>& owned) override {
    return cross_reducescatter(input, data, dtype, op, owned);
  }
  Status alltoall(const NodeSet&, const uint8_t* send, const std::vector<collective::Range>& send_to, uint8_t* recv,
                  const std::vector<collective::Range>& recv_from) override {
    return cross_alltoall(send, send_to, recv, recv_from);
  }
  NcclPeers ncclPeers() const override { return {}; }
  Status batchRuns() const override { return okStatus(); }
  DataPlane& dataPlane() override { return *this; }
  const DataPlane& dataPlane() const override { return *this; }
  std::shared_ptr<gpu::ClientGpu> gpuOf(int rank) override {
    auto it = gpus.find(rank);
    return it == gpus.end() ? nullptr : it->second;
  }

  std::map<int, std::shared_ptr<gpu::ClientGpu>> gpus;
  bool multi = false;
  std::set<int> local;
  std::function<Status(void*, size_t, DataType, ReduceOp)> cross_allreduce;
  std::function<Status(void*, size_t, int)> cross_broadcast;
  std::function<Status(uint8_t*, const std::vector<std::vector<collective::Range>>&)> cross_allgather;
  std::function<Status(const void*, void*, DataType, ReduceOp,
                       const std::vector<std::vector<collective::ElementRange>>&)>
      cross_reducescatter;
  std::function<Status(const uint8_t*, const std::vector<collective::Range>&, uint8_t*,
                       const std::vector<collective::Range>&)>
      cross_alltoall;
};

// Attaches `n` ranks on one fake GPU ("GPU-test", device 0), each with
// buffer kBufferId over its memory and 8 event slots, into `ranks` and
// `access`.
inline Status attachFakeRanks(int n, gpu::FakeGpuBackend* backend, FakeAccess* access, std::vector<FakeRank>* ranks) {
  backend->map_host_pointers = true;
  ranks->resize(n);
  for (int r = 0; r < n; ++r) {
    v1::CudaAttach attach;
    attach.set_device_uuid("GPU-test");
    for (int i = 0; i < 8; ++i) attach.add_ready_events(std::string(gpu::kIpcHandleBytes, 'e'));
    ASSIGN_OR_RETURN((*ranks)[r].gpu,
                     gpu::ClientGpu::attach(backend, 0, "GPU-test", attach, "rank " + std::to_string(r)));
    v1::CudaBufferExport exported;
    exported.set_buffer_id(kBufferId);
    exported.set_bytes(kBufferBytes);
    std::string handle(gpu::kIpcHandleBytes, '\0');
    void* base = (*ranks)[r].memory.data();
    std::memcpy(handle.data(), &base, sizeof(base));
    exported.set_ipc_handle(handle);
    exported.set_device_uuid("GPU-test");
    RETURN_IF_ERROR((*ranks)[r].gpu->addBuffer(exported));
    access->gpus[r] = (*ranks)[r].gpu;
  }
  return okStatus();
}

}  // namespace gradsync::executor
