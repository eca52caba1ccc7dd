// SPDX-License-Identifier: Apache-2.0
// One job's collectives over several GPUs of this node, and the steps across them that the paths among the
// daemons share: the GPUs combined in place (NCCL over the node's GPUs,
// host memory where NCCL cannot), each GPU's ranks reduced there, and the
// copies back to every rank.
#pragma once

#include <vector>

#include "base/status.h"
#include "daemon/executor/job_gpus.h"
#include "daemon/executor/node_gpu_comms.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/nccl_library.h"

namespace gradsync::executor {

class NodeGpus {
 public:
  using Members = JobGpus::Members;

  // `gpus`: the job's streams, buffers and members (outlives this);
  // `nccl` (null: none) for a communicator over the node's GPUs.
  NodeGpus(gpu::DeviceOps* ops, JobGpus* gpus, const gpu::NcclLibrary* nccl)
      : ops_(ops), gpus_(gpus), comms_(ops, nccl) {}

  // One node, several GPUs (`groups`: the members by GPU). Allreduce: each
  // GPU's ranks into its fusion buffer, the GPUs combined, the result back
  // to every rank. Broadcast: the root's tensor to every GPU, then to each
  // rank there.
  Status allreduce(const Response& r, const std::vector<Members>& groups, RankAccess& access);
  Status broadcast(const Response& r, const std::vector<Members>& groups, RankAccess& access);
  // Allgather and alltoall through every GPU's blocks gathered on every
  // GPU; reducescatter through an allreduce of the GPUs' sums.
  ResponseResult gatherLike(const Response& r, const std::vector<Members>& groups, RankAccess& access);
  ResponseResult reducescatter(const Response& r, const std::vector<Members>& groups, RankAccess& access);

  // In place across `buffers` (one per GPU of `groups`, `bytes` each): NCCL
  // allreduce with `op`, or (bytes from index `root` >= 0) broadcast; host
  // memory where NCCL cannot.
  Status acrossGpus(const Response& r, const std::vector<Members>& groups, const std::vector<void*>& buffers,
                    size_t bytes, ReduceOp op, int root, RankAccess& access);
  // In place across `buffers` (one per GPU, groups.size() blocks of `block`
  // bytes each): GPU g's block g to every GPU; NCCL, else host memory.
  Status gatherAcrossGpus(const Response& r, const std::vector<Members>& groups, const std::vector<void*>& buffers,
                          size_t block, RankAccess& access);
  // Each group's fusion buffer (r's length) on its GPU, its ranks reduced
  // there with `op` once their ready events are reached (a group without
  // ranks: the buffer only); `waited` counts the groups awaited.
  StatusOr<std::vector<void*>> reduceEachGpu(const Response& r, const std::vector<Members>& groups, ReduceOp op,
                                             size_t* waited);
  // Into each member's output from its GPU's `gathered` buffer, where
  // request i's input starts at at[i].
  Status copyFromGathered(const Response& r, const Members& m, const std::vector<size_t>& index,
                          const std::vector<size_t>& at, const uint8_t* gathered);
  // From each GPU's `landing` place to its other members (broadcast).
  Status copyFromLanding(const Response& r, const std::vector<Members>& groups, const std::vector<void*>& landing);
  // Each member's rows of the reduced `fused` buffer (rows: per request)
  // into its output, with the average and postscale (reducescatter).
  Status scatterRows(const Response& r, const Members& m, const std::vector<size_t>& index,
                     const std::vector<int64_t>& rows, const uint8_t* fused);

 private:
  Status acrossGpusOnHost(const Response& r, const std::vector<Members>& groups, const std::vector<void*>& buffers,
                          size_t bytes, ReduceOp op, int root);
  Status gatherAcrossGpusOnHost(const Response& r, const std::vector<Members>& groups,
                                const std::vector<void*>& buffers, size_t block);
  // The group's inputs reduced with `op` (and the prescale) into `out`.
  Status reduceOnGpu(const Response& r, const Members& group, void* out, ReduceOp op);

  gpu::DeviceOps* const ops_;
  JobGpus* const gpus_;
  NodeGpuComms comms_;  // NCCL over this node's GPUs
};

}  // namespace gradsync::executor
