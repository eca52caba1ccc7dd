// SPDX-License-Identifier: Apache-2.0
// Collectives on CUDA tensors of the ranks of one node that share a GPU.
// The executor polls each rank's "ready" event on the host (a stream made to
// wait on it would hang for good if the rank died first), the kernels reduce
// or copy between the ranks' mapped allocations, and the stream records each
// rank's "done" event, which the rank's own stream waits on. Done messages
// go out as soon as the work is enqueued.
//
// Jobs across nodes, a type per collective (allreduce_across_daemons.h,
// broadcast_across_daemons.h, gather_across_daemons.h for allgather and
// alltoall, reducescatter_across_daemons.h), sharing the daemons' NCCL
// communicators (DaemonComms): the local ranks' tensors are reduced on the
// GPU into the device's fusion buffer, then combined among the daemons by
// NCCL where every node has a GPU and NCCL, or else copied to host memory,
// combined by the same ring as CPU tensors (UCX) and copied back; then
// written to every local rank's tensor. Adasum (AdasumOnGpus) goes through
// host memory, on one node too.
//
// Allgather, alltoall and reducescatter write into an output buffer the
// caller sized beforehand (Enqueue.cuda_output); its size is checked against
// the negotiated result.
//
// Allgather, alltoall and reducescatter across nodes go over NCCL for the
// whole job and stage through host memory otherwise.
//
// Several GPUs in one node (NodeGpus, node_gpus.h): allreduce and broadcast
// of a one-node job reduce each GPU's ranks on that GPU, then combine the
// GPUs through an NCCL communicator over them that the daemon holds whole
// (host memory for a dtype NCCL lacks, without NCCL, or after it failed);
// allgather, alltoall and reducescatter likewise. Across nodes
// (AllreduceAcrossDaemons), allreduce combines the node's GPUs first, then the
// first GPU's buffer among the daemons, then back to the others; broadcast
// among the first GPUs of the nodes, the root's node spreading it to its
// GPUs first, the others after. The job's streams, buffers and members on
// the GPUs: JobGpus (job_gpus.h).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "daemon/executor/adasum_on_gpus.h"
#include "daemon/executor/allreduce_across_daemons.h"
#include "daemon/executor/broadcast_across_daemons.h"
#include "daemon/executor/cpu_executor.h"
#include "daemon/executor/daemon_comms.h"
#include "daemon/executor/gather_across_daemons.h"
#include "daemon/executor/job_gpus.h"
#include "daemon/executor/node_gpus.h"
#include "daemon/executor/reducescatter_across_daemons.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/nccl_comm.h"

namespace gradsync::executor {

// One per job (its streams and buffers: JobGpus).
class GpuExecutor : public DeviceExecutor {
 public:
  // `nccl` (null: none, or disabled) carries CUDA tensors between daemons
  // when every node has a GPU; host staging otherwise.
  GpuExecutor(gpu::DeviceOps* ops, const gpu::NcclLibrary* nccl)
      : ops_(ops),
        gpus_(ops),
        node_gpus_(ops, &gpus_, nccl),
        daemons_(ops, nccl),
        allreduce_across_(ops, &gpus_, &node_gpus_, &daemons_),
        broadcast_across_(ops, &gpus_, &node_gpus_, &daemons_),
        gather_across_(ops, &gpus_, &node_gpus_, &daemons_),
        reducescatter_across_(ops, &gpus_, &node_gpus_, &daemons_),
        adasum_(ops, &gpus_) {}
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
  // One node: into the callers' output buffers (sizes checked first).
  ResponseResult allgather(const Response& r, RankAccess& access);
  ResponseResult alltoall(const Response& r, RankAccess& access);
  ResponseResult reducescatter(const Response& r, RankAccess& access);
  gpu::DeviceOps* ops_;
  JobGpus gpus_;         // this job's streams, buffers and members on the node's GPUs
  NodeGpus node_gpus_;   // several GPUs of this node
  DaemonComms daemons_;  // NCCL among the daemons
  // The collectives of jobs across daemons, and Adasum (on one node too).
  AllreduceAcrossDaemons allreduce_across_;
  BroadcastAcrossDaemons broadcast_across_;
  GatherAcrossDaemons gather_across_;
  ReducescatterAcrossDaemons reducescatter_across_;
  AdasumOnGpus adasum_;
};

}  // namespace gradsync::executor
