// SPDX-License-Identifier: Apache-2.0
// A job's allgather and alltoall of CUDA tensors across daemons. The whole
// job's (every node decides alike: the daemons' communicator exists) go
// over NCCL, on the lead GPU (the communicator's), after several GPUs'
// inputs were gathered on every GPU of the node (NodeGpus's
// blocks):
// - allgather: this node's inputs, end to end in request order, into its
//   block of a buffer of one block per node (blocks as large as the largest
//   node's share), an in-place ncclAllGather, the buffer to the node's other
//   GPUs, and each rank's output from its GPU's copy;
// - alltoall: the messages to each other node packed as the ring's
//   exchange packs them (executor_util.h's routes), grouped ncclSend and
//   ncclRecv with each node, the received messages to the other GPUs, and
//   each rank's output from its GPU's inputs and messages.
// Otherwise (process sets, jobs without the daemons' communicator, after it
// failed) through host memory and the daemons' ring (alltoall: their
// pairwise exchange), as the CPU executor does them
// (cpu_across_daemons.h), with the node's ranks copied out of and
// back into their GPU memory, whichever of the node's GPUs they use.
#pragma once

#include <vector>

#include "base/status.h"
#include "daemon/executor/daemon_comms.h"
#include "daemon/executor/job_gpus.h"
#include "daemon/executor/node_gpus.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/device_ops.h"

namespace gradsync::executor {

struct AlltoallRoutes;  // executor_util.h

class GatherAcrossDaemons {
 public:
  using Members = JobGpus::Members;

  // The job's GPUs, its node's GPUs and the daemons' communicators (all
  // outlive this).
  GatherAcrossDaemons(gpu::DeviceOps* ops, JobGpus* gpus, NodeGpus* node_gpus, DaemonComms* daemons)
      : ops_(ops), gpus_(gpus), node_gpus_(node_gpus), daemons_(daemons) {}

  // Allgather or alltoall, then each local rank's share back.
  ResponseResult gatherLike(const Response& r, RankAccess& access);

 private:
  // Through host memory (`groups`: the members by GPU); its alltoall step:
  // the messages packed from `host` (inputs at `offset`) into `send`,
  // exchanged, the others' in `recv`.
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

  // Over the daemons' NCCL communicator (`nodes`).
  ResponseResult ncclGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes,
                                std::vector<Members> resolved);
  struct GatherLikePlan;
  // Its steps: the layout of the GPUs' buffers; the steps in order
  // (`waited`: as waitReadyOnGpus), once the outputs' sizes are known:
  // several GPUs' inputs gathered on each, this node's part packed on the
  // lead GPU, the exchange among the nodes, and what came to each rank's
  // output.
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

  gpu::DeviceOps* const ops_;
  JobGpus* const gpus_;
  NodeGpus* const node_gpus_;
  DaemonComms* const daemons_;
};

}  // namespace gradsync::executor
