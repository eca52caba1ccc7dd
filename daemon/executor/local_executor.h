// SPDX-License-Identifier: Apache-2.0
// Runs negotiated collectives among the ranks of one node, reading and
// writing their arenas in place (zero copy) with the reduce pool.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "daemon/collective/ring_movement.h"
#include "daemon/executor/reduce_pool.h"
#include "daemon/fusion/fusion_planner.h"
#include "daemon/gpu/client_gpu.h"
#include "handoff/shm_arena.h"

namespace gradsync::executor {

using coordinator::Response;

// What one member of a response receives besides its buffer contents.
struct MemberResult {
  std::vector<int64_t> output_shape;     // ALLGATHER, ALLTOALL, REDUCESCATTER
  std::vector<int64_t> received_splits;  // ALLTOALL
};

struct ResponseResult {
  Status status;
  std::vector<MemberResult> members;  // parallel to Response::ranks
};

// The nodes taking part in a collective across daemons: their ring
// positions, increasing (see nodesOf in executor_util.h).
using NodeSet = std::vector<int>;

// The executor's window on the job's ranks.
class RankAccess {
 public:
  virtual ~RankAccess() = default;
  // The arena of `rank`; null when the rank is gone.
  virtual const handoff::ShmArena* arena(int rank) = 0;
  // Asks every active member of `response` for `bytes[i]` bytes of output in
  // its arena (shape `shapes[i]`) and waits for the answers (bounded by a
  // deadline). Returns pointers parallel to response.ranks (null for joined
  // members), each already bounds-checked.
  virtual StatusOr<std::vector<uint8_t*>> requestOutputs(const Response& response, const std::vector<uint64_t>& bytes,
                                                         const std::vector<std::vector<int64_t>>& shapes) = 0;
  // Multi-node jobs: whether `rank` lives on this node, and the allreduce
  // among the daemons of `nodes` of a node-reduced buffer (in place).
  // Every crossNode* call runs among the daemons of its `nodes` only (those
  // holding ranks of the collective's process set); on a node outside them
  // it does nothing and returns OK. Indexed arguments ("by node") are
  // indexed by ring position among all nodes.
  virtual bool multiNode() const { return false; }
  virtual bool isLocal(int rank) const { return true; }
  virtual Status crossNodeAllreduce(const NodeSet& nodes, void* data, size_t count, DataType dtype, ReduceOp op) {
    return unimplemented("single-node job");
  }
  // Ring position of the node holding `rank`, and the number of nodes.
  virtual int nodeOf(int rank) const { return 0; }
  virtual int nodeCount() const { return 1; }
  // Among the nodes' daemons: broadcast from the node holding `root_rank`;
  // allgather of the byte ranges each node owns (indexed by node).
  virtual Status crossNodeBroadcast(const NodeSet& nodes, void* data, size_t bytes, int root_rank) {
    return unimplemented("single-node job");
  }
  virtual Status crossNodeAllgather(const NodeSet& nodes, uint8_t* buffer,
                                    const std::vector<std::vector<collective::Range>>& owned) {
    return unimplemented("single-node job");
  }
  // Pairwise exchange among the nodes' daemons (indexed by node): sends
  // `send_to[m]` of `send` to node m, receives node m's bytes into
  // `recv_from[m]` of `recv`.
  virtual Status crossNodeAlltoall(const NodeSet& nodes, const uint8_t* send,
                                   const std::vector<collective::Range>& send_to, uint8_t* recv,
                                   const std::vector<collective::Range>& recv_from) {
    return unimplemented("single-node job");
  }
  // Reduce-scatter among the nodes' daemons of this node's contribution
  // `input` (read only; may be `data`): afterwards `data` holds this node's
  // `owned` elements (indexed by node) reduced over every node.
  virtual Status crossNodeReduceScatter(const NodeSet& nodes, const void* input, void* data, DataType dtype,
                                        ReduceOp op, const std::vector<std::vector<collective::ElementRange>>& owned) {
    return unimplemented("single-node job");
  }
  // The GPU state of a local `rank` that attached one (null otherwise). The
  // reference keeps its mappings open while the caller uses them.
  virtual std::shared_ptr<gpu::ClientGpu> gpuOf(int rank) { return nullptr; }
  // Multi-node jobs whose every node has a GPU: what the daemons' NCCL
  // communicator forms from (the leader's id, this node's rank among the
  // nodes, their number). An empty id: no NCCL among these daemons.
  struct NcclPeers {
    std::string id;
    int rank = -1;
    int nranks = 0;
  };
  virtual NcclPeers ncclPeers() const { return {}; }
  // A phase of the collective running begins or ends (the job's timeline).
  virtual void phase(const char* name, bool begin) {}
};

// A phase for RankAccess::phase, from construction to destruction.
class PhaseScope {
 public:
  PhaseScope(RankAccess& access, const char* name) : access_(access), name_(name) { access_.phase(name_, true); }
  ~PhaseScope() { access_.phase(name_, false); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  RankAccess& access_;
  const char* const name_;
};

// Runs fused responses whose tensors live on a device (CUDA).
class DeviceExecutor {
 public:
  virtual ~DeviceExecutor() = default;
  virtual std::vector<ResponseResult> run(const fusion::FusedResponse& fused, RankAccess& access) = 0;
};

class LocalExecutor {
 public:
  // `gpu` (null on a node without GPUs) takes the responses of CUDA tensors.
  explicit LocalExecutor(ReducePool* pool, DeviceExecutor* gpu = nullptr) : pool_(pool), gpu_(gpu) {}

  // Executes every response of `fused`; results are parallel to
  // fused.responses. Responses that carry an error are returned as is.
  std::vector<ResponseResult> run(const fusion::FusedResponse& fused, RankAccess& access);

 private:
  Status allreduce(const std::vector<const Response*>& responses, RankAccess& access);
  std::vector<ResponseResult> relayWithoutGpu(const fusion::FusedResponse& fused, RankAccess& access);
  // Multi-node allreduce of a fused response: large tensors with one rank
  // per node each get a ring of their own, the rest one fused ring.
  Status hierarchicalAllreduce(const std::vector<const Response*>& responses, RankAccess& access);
  // One ring for `responses`: the local ranks reduced into the fusion
  // buffer around it, or in place where one local rank holds the only one.
  Status fusedAllreduce(const std::vector<const Response*>& responses, RankAccess& access);
  Status inPlaceAllreduce(const Response& response, const coordinator::Request& request, RankAccess& access);
  ResponseResult multiNodeBroadcast(const Response& r, RankAccess& access);
  ResponseResult multiNodeAllgather(const Response& r, RankAccess& access);
  // Adasum: every rank's tensor (across nodes: allgathered first) combined
  // in rank order by reduce::adasum, the result written to the local ranks.
  ResponseResult adasumAllreduce(const Response& r, RankAccess& access);
  ResponseResult multiNodeReducescatter(const Response& r, RankAccess& access);
  ResponseResult multiNodeAlltoall(const Response& r, RankAccess& access);
  ResponseResult broadcast(const Response& r, RankAccess& access);
  ResponseResult allgather(const Response& r, RankAccess& access);
  ResponseResult alltoall(const Response& r, RankAccess& access);
  ResponseResult reducescatter(const Response& r, RankAccess& access);

  ReducePool* pool_;
  DeviceExecutor* gpu_;
  std::vector<uint8_t> fusion_;  // grown once, reused (never re-faulted per call)
};

}  // namespace gradsync::executor
