// SPDX-License-Identifier: Apache-2.0
// Collectives on CUDA tensors of the ranks of one node that share a GPU.
// The executor polls each rank's "ready" event on the host (a stream made to
// wait on it would hang for good if the rank died first), the kernels reduce
// or copy between the ranks' mapped allocations, and the stream records each
// rank's "done" event, which the rank's own stream waits on. Done messages
// go out as soon as the work is enqueued.
//
// Jobs across nodes: the local ranks' tensors are reduced on the GPU into
// the device's fusion buffer, then combined among the daemons by NCCL where
// every node has a GPU and NCCL (gpu_executor_cross.cc), or else copied to
// pinned host memory, combined by the same ring as CPU tensors (UCX) and
// copied back; then written to every local rank's tensor.
//
// Allgather, alltoall and reducescatter write into an output buffer the
// caller sized beforehand (Enqueue.cuda_output); its size is checked against
// the negotiated result.
//
// Allgather, alltoall and reducescatter across nodes go over NCCL for the
// whole job (gpu_executor_nccl_gather.cc) and stage through host memory
// otherwise (gpu_executor_staged.cc).
//
// Several GPUs in one node (NodeGpus, node_gpus.h): allreduce and broadcast
// of a one-node job reduce each GPU's ranks on that GPU, then combine the
// GPUs through an NCCL communicator over them that the daemon holds whole
// (host memory for a dtype NCCL lacks, without NCCL, or after it failed);
// allgather, alltoall and reducescatter likewise. Across nodes
// (gpu_executor_gpus.cc), allreduce combines the node's GPUs first, then the
// first GPU's buffer among the daemons, then back to the others; broadcast
// among the first GPUs of the nodes, the root's node spreading it to its
// GPUs first, the others after. The job's streams, buffers and members on
// the GPUs: JobGpus (job_gpus.h).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "daemon/executor/cpu_executor.h"
#include "daemon/executor/daemon_comms.h"
#include "daemon/executor/job_gpus.h"
#include "daemon/executor/node_gpus.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/nccl_comm.h"

namespace gradsync::executor {

struct AlltoallRoutes;  // executor_util.h
class GpuPhaseTimer;    // gpu_phase_timer.h

// One per job (its streams and buffers: JobGpus).
class GpuExecutor : public DeviceExecutor {
 public:
  // `nccl` (null: none, or disabled) carries CUDA tensors between daemons
  // when every node has a GPU; host staging otherwise.
  GpuExecutor(gpu::DeviceOps* ops, const gpu::NcclLibrary* nccl)
      : ops_(ops), gpus_(ops), node_gpus_(ops, &gpus_, nccl), daemons_(ops, nccl) {}
  ~GpuExecutor() override = default;
  GpuExecutor(const GpuExecutor&) = delete;
  GpuExecutor& operator=(const GpuExecutor&) = delete;
  std::vector<ResponseResult> run(const fusion::FusedResponse& fused, RankAccess& access) override;

 private:
  using Member = JobGpus::Member;
  using Members = JobGpus::Members;
  // One response of a bucket that is not a fused allreduce across nodes.
  ResponseResult runOne(const Response& r, RankAccess& access);
  Status allreduce(const Response& r, RankAccess& access);
  Status broadcast(const Response& r, RankAccess& access);
  // Across nodes, through host memory and the daemons' ring.
  Status stagedAllreduce(const std::vector<const Response*>& responses, RankAccess& access);
  // stagedAllreduce's batch: the responses' members, their places in the
  // device's fusion buffer (elements) and the buffers it goes through.
  struct FusedAllreduce {
    const std::vector<const Response*>& responses;
    RankAccess& access;
    const coordinator::Request& first;
    size_t esize;
    ReduceOp ring_op;  // AVERAGE sums among the nodes; the average comes last
    std::vector<Members> members = {};
    std::vector<size_t> offsets = {};
    size_t total = 0;
    uint8_t* staging = nullptr;  // host
    uint8_t* fused = nullptr;    // device
    void* stream = nullptr;      // cudaStream_t
    // The fusion buffer holds every response's values already (identities
    // where no local rank contributes): several GPUs of a node, combined.
    bool filled = false;
  };
  // Its steps: the local ranks into the fusion buffer (`waited`: the
  // members whose ready events were awaited); among the nodes with NCCL, or
  // through host memory and the data plane; back to every local rank.
  Status reduceIntoFused(const FusedAllreduce& f, std::vector<const Members*>* waited);
  // With every local rank on `device` (-1: none has memory here), `groups`
  // by response: the batch laid out in `f`, reduced, across the nodes
  // (over `comm` when not null) and back; the steps timed on the timeline.
  Status oneGpuAllreduce(FusedAllreduce& f, std::vector<std::vector<Members>>& groups, int device, gpu::NcclComm* comm);
  Status reduceAcrossNodesAndBack(const FusedAllreduce& f, gpu::NcclComm* comm, GpuPhaseTimer& timer,
                                  std::vector<const Members*>* waited);
  Status ncclAcrossNodes(const FusedAllreduce& f, gpu::NcclComm* comm);
  Status stagedAcrossNodes(const FusedAllreduce& f);
  Status scatterFromFused(const FusedAllreduce& f);
  Status stagedBroadcast(const Response& r, RankAccess& access);
  // Broadcast over the daemons' communicator for `r` (`nodes`).
  Status ncclBroadcast(const Response& r, RankAccess& access, const NodesComm& nodes, std::vector<Members> resolved);
  // Allgather or alltoall across nodes: every rank's input through host
  // memory and the ring's allgather, then each local rank's share back.
  ResponseResult stagedGatherLike(const Response& r, RankAccess& access);
  // The same without the daemons' NCCL communicator (`groups`: the
  // members by GPU); its alltoall step: the messages packed from `host`
  // (inputs at `offset`) into `send`, exchanged, the others' in `recv`.
  ResponseResult hostGatherLike(const Response& r, RankAccess& access, const std::vector<Members>& groups);
  Status stagedAlltoallExchange(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                                const AlltoallRoutes& routes, const std::vector<size_t>& offset, const uint8_t* host,
                                uint8_t* send, uint8_t* recv);
  // Its last step: into each member's output, from `host` (every rank's
  // input at offset[its request], `total` bytes) or, alltoall, as
  // `routes` says, also from `recv` (the other nodes' messages).
  Status copyGatheredOut(const Response& r, const Members& m, const std::vector<size_t>& index,
                         const std::vector<size_t>& offset, size_t total, const AlltoallRoutes& routes,
                         const uint8_t* host, const uint8_t* recv);
  // Across nodes over the daemons' NCCL communicator (the whole job's
  // responses; gpu_executor_nccl_gather.cc).
  ResponseResult ncclGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes,
                                std::vector<Members> resolved);
  struct GatherLikePlan;  // gpu_executor_nccl_gather.cc
  // ncclGatherLike's steps: the layout of the GPUs' buffers; the steps in
  // order (`waited`: as waitReadyOnGpus), once the outputs' sizes are
  // known: several GPUs' inputs gathered on each, this node's part packed
  // on the lead GPU, the exchange among the nodes, and what came to each
  // rank's output.
  GatherLikePlan planGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes,
                                const std::vector<Members>& groups);
  Status runGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes,
                       const std::vector<Members>& groups, const std::vector<uint64_t>& out_bytes, GatherLikePlan& plan,
                       size_t* waited);
  Status gatherInputsOnEveryGpu(const Response& r, const std::vector<Members>& groups, const GatherLikePlan& plan,
                                RankAccess& access);
  Status packForTheNodes(const Response& r, const std::vector<Members>& groups, const GatherLikePlan& plan);
  Status exchangeAmongTheNodes(const Response& r, RankAccess& access, const NodesComm& nodes, const Members& lead,
                               const GatherLikePlan& plan);
  Status writeGatherLikeOutputs(const Response& r, const std::vector<Members>& groups, const GatherLikePlan& plan,
                                RankAccess& access);
  ResponseResult ncclReducescatter(const Response& r, RankAccess& access, gpu::NcclComm* comm,
                                   std::vector<Members> resolved);
  // `groups` with the one on `lead` first (an empty one added if no local
  // rank uses that GPU).
  StatusOr<std::vector<Members>> withLead(std::vector<Members> groups, int lead);
  // The GPU for the daemons' communicator: its own once formed, else the
  // first of `groups`.
  int leadDevice(const std::vector<Members>& groups) const;
  // Reducescatter across nodes: reduced on the GPU, allreduced among the
  // nodes through host memory, each local rank's rows back.
  ResponseResult stagedReducescatter(const Response& r, RankAccess& access);
  // Its steps once the layout is known (`index`: each group's requests;
  // `host`: the staging buffer; `waited`: as waitReadyOnGpus).
  Status reducescatterThroughHost(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                                  const std::vector<std::vector<size_t>>& index, const std::vector<int64_t>& rows,
                                  uint8_t* host, size_t* waited);
  // Copies the members' inputs to `host`, each at offset[its request].
  Status stageInputs(const Response& r, const Members& m, const std::vector<size_t>& index,
                     const std::vector<size_t>& offset, uint8_t* host);
  // Adasum: every rank's tensor through host memory (and the daemons'
  // allgather), reduce::adasum, the result to every local rank
  // (gpu_executor_adasum.cc).
  ResponseResult adasumAllreduce(const Response& r, RankAccess& access);
  // Its first step: every local rank's tensor into `host` at offset[its
  // request], once ready (`waited`: as waitReadyOnGpus).
  Status stageEveryInput(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                         const std::vector<size_t>& offset, uint8_t* host, size_t* waited);
  // One node: into the callers' output buffers (sizes checked first).
  ResponseResult allgather(const Response& r, RankAccess& access);
  ResponseResult alltoall(const Response& r, RankAccess& access);
  ResponseResult reducescatter(const Response& r, RankAccess& access);

  // Across nodes, several GPUs here (gpu_executor_gpus.cc): each GPU's ranks
  // into its fusion buffer, the GPUs combined, the first GPU's buffer among
  // the nodes, then back to the other GPUs and to every rank.
  // `groups[t]`: response t's members by GPU; `devices`: all of them, the
  // lead first; `comm`: the daemons' communicator for the batch (null: the
  // ring).
  Status multiGpuStagedAllreduce(const std::vector<const Response*>& responses, RankAccess& access,
                                 std::vector<std::vector<Members>> groups, const std::vector<int>& devices,
                                 gpu::NcclComm* comm);
  // Its view of the batch per GPU of `devices`: that GPU's members of each
  // response (taken from `groups`), its fusion buffer and stream.
  StatusOr<std::vector<FusedAllreduce>> viewsByGpu(const std::vector<const Response*>& responses, RankAccess& access,
                                                   std::vector<std::vector<Members>>& groups,
                                                   const std::vector<int>& devices);
  // Identities into `f.fused` where no member of response t is on f's GPU
  // (through f.staging, read before it returns).
  Status fillIdentitiesOnDevice(const FusedAllreduce& f);
  gpu::DeviceOps* ops_;
  JobGpus gpus_;         // this job's streams, buffers and members on the node's GPUs
  NodeGpus node_gpus_;   // several GPUs of this node
  DaemonComms daemons_;  // NCCL among the daemons
};

}  // namespace gradsync::executor
