// SPDX-License-Identifier: Apache-2.0
// A job's broadcast of CUDA tensors across daemons: over the daemons'
// communicator where every node has one (from the root's GPU to the
// node's other GPUs first, on the other nodes from the communicator's GPU
// to the others after), else the root's tensor through host memory and the
// daemons' ring to every local rank.
#pragma once

#include <vector>

#include "base/status.h"
#include "daemon/executor/daemon_comms.h"
#include "daemon/executor/job_gpus.h"
#include "daemon/executor/node_gpus.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/device_ops.h"

namespace gradsync::executor {

class BroadcastAcrossDaemons {
 public:
  using Members = JobGpus::Members;

  // The job's GPUs, its node's GPUs and the daemons' communicators (all
  // outlive this).
  BroadcastAcrossDaemons(gpu::DeviceOps* ops, JobGpus* gpus, NodeGpus* node_gpus, DaemonComms* daemons)
      : ops_(ops), gpus_(gpus), node_gpus_(node_gpus), daemons_(daemons) {}

  Status broadcast(const Response& r, RankAccess& access);

 private:
  // Over the daemons' communicator for `r` (`nodes`).
  Status ncclBroadcast(const Response& r, RankAccess& access, const NodesComm& nodes, std::vector<Members> resolved);

  gpu::DeviceOps* const ops_;
  JobGpus* const gpus_;
  NodeGpus* const node_gpus_;
  DaemonComms* const daemons_;
};

}  // namespace gradsync::executor
