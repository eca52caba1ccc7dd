// SPDX-License-Identifier: Apache-2.0
// Adasum of CUDA tensors, through host memory, on one node or across
// daemons. Every rank's tensor is copied out (across nodes, the daemons'
// allgather brings the other nodes' ranks), combined by the CPU path's
// reduce::adasum in rank order, and the result copied back to every local
// rank: the same result, bit for bit, as for CPU tensors. Horovod combines
// a node's GPUs with NCCL first and runs Adasum among the nodes only; that
// changes the result (a sum within the node, Adasum between nodes), so
// gradsync keeps the one definition. Host memory holds every rank's tensor
// (ranks x bytes), as on the CPU path.
#pragma once

#include <vector>

#include "daemon/executor/job_gpus.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/device_ops.h"

namespace gradsync::executor {

class AdasumOnGpus {
 public:
  using Members = JobGpus::Members;

  // The job's GPUs (outlive this).
  AdasumOnGpus(gpu::DeviceOps* ops, JobGpus* gpus) : ops_(ops), gpus_(gpus) {}

  ResponseResult adasum(const Response& r, RankAccess& access);

 private:
  // Its first step: every local rank's tensor into `host` at offset[its
  // request], once ready (`waited`: as waitReadyOnGpus).
  Status stageEveryInput(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                         const std::vector<size_t>& offset, uint8_t* host, size_t* waited);

  gpu::DeviceOps* const ops_;
  JobGpus* const gpus_;
};

}  // namespace gradsync::executor
