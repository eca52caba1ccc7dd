// SPDX-License-Identifier: Apache-2.0
// A job's fused allreduce of CUDA tensors across daemons: the node's ranks
// reduced on their GPU into its fusion buffer (several GPUs: each GPU's
// ranks on it, then the GPUs combined by NodeGpus), the lead GPU's buffer
// among the daemons (NCCL over the daemons' communicator where every node
// has one, else through host memory and the daemons' ring), then back to
// the other GPUs and to every local rank.
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

class GpuPhaseTimer;  // gpu_phase_timer.h

class AllreduceAcrossDaemons {
 public:
  using Members = JobGpus::Members;

  // The job's GPUs, its node's GPUs and the daemons' communicators (all
  // outlive this).
  AllreduceAcrossDaemons(gpu::DeviceOps* ops, JobGpus* gpus, NodeGpus* node_gpus, DaemonComms* daemons)
      : ops_(ops), gpus_(gpus), node_gpus_(node_gpus), daemons_(daemons) {}

  // A fused allreduce's responses: reduced here, among the daemons, back.
  Status allreduce(const std::vector<const Response*>& responses, RankAccess& access);

 private:
  // The batch: the responses' members, their places in the device's fusion
  // buffer (elements) and the buffers it goes through.
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

  // Several GPUs here: each GPU's ranks into its fusion buffer, the GPUs
  // combined, the first GPU's buffer among the nodes, then back to the
  // other GPUs and to every rank. `groups[t]`: response t's members by
  // GPU; `devices`: all of them, the lead first; `comm`: the daemons'
  // communicator for the batch (null: the ring).
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
  DaemonComms* const daemons_;
};

}  // namespace gradsync::executor
