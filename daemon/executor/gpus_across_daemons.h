// SPDX-License-Identifier: Apache-2.0
// One job's collectives on CUDA tensors across daemons: the node's ranks
// reduced or gathered on their GPUs (several GPUs: NodeGpus first), then
// NCCL among the daemons' GPUs where every node has a GPU and NCCL
// (gpus_across_daemons.cc, gpus_across_daemons_nccl.cc), or else through host
// memory and the daemons' data plane (gpus_across_daemons.cc,
// gpus_across_daemons_staged.cc); then back to every local rank. Adasum goes
// through host memory (gpus_across_daemons_adasum.cc), on one node too.
#pragma once

#include <vector>

#include "base/status.h"
#include "daemon/executor/daemon_comms.h"
#include "daemon/executor/job_gpus.h"
#include "daemon/executor/node_gpus.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/nccl_comm.h"

namespace gradsync::executor {

struct AlltoallRoutes;  // executor_util.h
class GpuPhaseTimer;    // gpu_phase_timer.h

class GpusAcrossDaemons {
 public:
  using Member = JobGpus::Member;
  using Members = JobGpus::Members;

  // `gpus` and `node_gpus`: the job's (outlive this); `nccl` (null: none)
  // for the communicators among the daemons.
  GpusAcrossDaemons(gpu::DeviceOps* ops, JobGpus* gpus, NodeGpus* node_gpus, const gpu::NcclLibrary* nccl)
      : ops_(ops), gpus_(gpus), node_gpus_(node_gpus), daemons_(ops, nccl) {}

  // A fused allreduce's responses: reduced here, among the daemons, back.
  Status allreduce(const std::vector<const Response*>& responses, RankAccess& access);
  Status broadcast(const Response& r, RankAccess& access);
  // Allgather or alltoall: over the daemons' communicator for the whole
  // job, else every rank's input through host memory and the data plane,
  // then each local rank's share back.
  ResponseResult gatherLike(const Response& r, RankAccess& access);
  // Reduced on the GPUs, among the nodes (NCCL, or a ring reduce-scatter
  // through host memory), each local rank's rows back.
  ResponseResult reducescatter(const Response& r, RankAccess& access);
  // Every rank's tensor through host memory (and the daemons' allgather),
  // reduce::adasum, the result to every local rank.
  ResponseResult adasum(const Response& r, RankAccess& access);

 private:
  // allreduce's batch: the responses' members, their places in the
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
  // Broadcast over the daemons' communicator for `r` (`nodes`).
  Status ncclBroadcast(const Response& r, RankAccess& access, const NodesComm& nodes, std::vector<Members> resolved);
  // gatherLike without the daemons' NCCL communicator (`groups`: the
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
  // gatherLike over the daemons' NCCL communicator (the whole job's
  // responses; gpus_across_daemons_nccl.cc).
  ResponseResult ncclGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes,
                                std::vector<Members> resolved);
  struct GatherLikePlan;  // gpus_across_daemons_nccl.cc
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
  // reducescatter's steps once the layout is known (`index`: each group's requests;
  // `host`: the staging buffer; `waited`: as waitReadyOnGpus).
  Status reducescatterThroughHost(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                                  const std::vector<std::vector<size_t>>& index, const std::vector<int64_t>& rows,
                                  uint8_t* host, size_t* waited);
  // Copies the members' inputs to `host`, each at offset[its request].
  Status stageInputs(const Response& r, const Members& m, const std::vector<size_t>& index,
                     const std::vector<size_t>& offset, uint8_t* host);
  // adasum's first step: every local rank's tensor into `host` at offset[its
  // request], once ready (`waited`: as waitReadyOnGpus).
  Status stageEveryInput(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                         const std::vector<size_t>& offset, uint8_t* host, size_t* waited);

  // Across nodes, several GPUs here (gpus_across_daemons_node_gpus.cc): each GPU's ranks
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

  gpu::DeviceOps* const ops_;
  JobGpus* const gpus_;
  NodeGpus* const node_gpus_;
  DaemonComms daemons_;  // NCCL among the daemons
};

}  // namespace gradsync::executor
