// SPDX-License-Identifier: Apache-2.0
// A job's reducescatter of CUDA tensors across daemons: the node's ranks
// reduced on their GPUs (several GPUs: their sums combined), then among the
// nodes, and each local rank's rows back. The whole job's with elements go
// over the daemons' communicator (an allreduce: twice the bytes of a
// reduce-scatter, whose equal blocks per node the ranks' rows rarely make,
// but one call and no layout across nodes); the others through host memory
// and a ring reduce-scatter of the daemons, as on the CPU path.
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

class ReducescatterAcrossDaemons {
 public:
  using Members = JobGpus::Members;

  // The job's GPUs, its node's GPUs and the daemons' communicators (all
  // outlive this).
  ReducescatterAcrossDaemons(gpu::DeviceOps* ops, JobGpus* gpus, NodeGpus* node_gpus, DaemonComms* daemons)
      : ops_(ops), gpus_(gpus), node_gpus_(node_gpus), daemons_(daemons) {}

  ResponseResult reducescatter(const Response& r, RankAccess& access);

 private:
  ResponseResult ncclReducescatter(const Response& r, RankAccess& access, gpu::NcclComm* comm,
                                   std::vector<Members> resolved);
  // Through host memory once the layout is known (`index`: each group's
  // requests; `host`: the staging buffer; `waited`: as waitReadyOnGpus).
  Status reducescatterThroughHost(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                                  const std::vector<std::vector<size_t>>& index, const std::vector<int64_t>& rows,
                                  uint8_t* host, size_t* waited);

  gpu::DeviceOps* const ops_;
  JobGpus* const gpus_;
  NodeGpus* const node_gpus_;
  DaemonComms* const daemons_;
};

}  // namespace gradsync::executor
