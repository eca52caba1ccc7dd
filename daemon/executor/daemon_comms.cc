// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/daemon_comms.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"

namespace gradsync::executor {

int NodesComm::rankOf(int node) const {
  return static_cast<int>(std::find(nodes.begin(), nodes.end(), node) - nodes.begin());
}

namespace {

// A limit ended early once the batch's epoch is over.
gpu::WaitLimit batchWait(const DataPlane& plane, std::chrono::milliseconds limit) {
  return gpu::WaitLimit(limit, [&plane] { return plane.batchRuns(); });
}

}  // namespace

gpu::WaitLimit DaemonComms::waitFor(const RankAccess& access) {
  return batchWait(access.dataPlane(), gpu::kStreamWaitLimit);
}

StatusOr<gpu::NcclComm*> DaemonComms::forJob(RankAccess& access, int device, DataType dtype) {
  ncclDataType_t type;
  if (nccl_ == nullptr || !gpu::ncclTypeOf(dtype, &type)) return nullptr;
  const DataPlane::NcclPeers peers = access.dataPlane().ncclPeers();
  if (peers.id.empty()) return nullptr;  // no NCCL among these daemons, or the batch's epoch is over
  if (peers.epoch != epoch_) {
    // A new epoch (elastic): the last one's communicators go (aborted, as
    // every node's do at this batch), and a failure there is forgotten.
    if (job_)
      GS_LOG(gpu, info, "epoch {}: the NCCL communicators among the daemons of epoch {} closed", peers.epoch, epoch_);
    sets_.clear();
    job_.reset();
    failed_ = false;
    epoch_ = peers.epoch;
  }
  if (failed_) return nullptr;
  if (job_) {
    if (device != device_) {
      // The callers lead with the communicator's GPU (device()).
      return internalError("the daemons' NCCL communicator is on GPU " + std::to_string(device_) + ", asked for GPU " +
                           std::to_string(device));
    }
    return job_.get();
  }
  auto comm = gpu::NcclComm::create(*nccl_, ops_, peers.id, peers.nranks, peers.rank, {device}, "among the daemons",
                                    batchWait(access.dataPlane(), std::chrono::seconds(30)));
  if (!comm.isOk()) {
    failed_ = true;
    GS_LOG(gpu, warn, "no NCCL among the daemons ({}); CUDA tensors go through host memory", comm.status().message());
    return nullptr;
  }
  GS_LOG(gpu, info, "NCCL communicator among {} daemons formed (this node rank {}, GPU {}; epoch {})", peers.nranks,
         peers.rank, device, peers.epoch);
  job_ = std::move(comm).value();
  device_ = device;
  return job_.get();
}

Status DaemonComms::fail(const Status& why, RankAccess& access) {
  failed_ = true;
  GS_LOG(gpu, warn,
         "NCCL among the daemons failed in epoch {} ({}); CUDA tensors among them go through host memory "
         "until the next epoch",
         epoch_, why.message());
  return access.dataPlane().stepFailed(why);
}

StatusOr<NodesComm> DaemonComms::forResponse(const Response& r, RankAccess& access, int device, DataType dtype) {
  NodesComm out;
  const NodeSet set_nodes = nodesOf(r, access);
  ASSIGN_OR_RETURN(gpu::NcclComm * whole, forJob(access, device, dtype));
  if (whole == nullptr) return out;  // host staging: its paths handle nodes outside a set
  if (r.process_set_id == 0) {
    out.comm = whole;
    for (int node = 0; node < whole->size(); ++node) out.nodes.push_back(node);
    return out;
  }
  out.nodes = set_nodes;
  const int self = whole->rank();  // among the daemons, node index = NCCL rank
  out.outside = std::find(set_nodes.begin(), set_nodes.end(), self) == set_nodes.end();
  auto known = std::find_if(sets_.begin(), sets_.end(), [&](const SetComm& c) {
    return c.process_set_id == r.process_set_id && c.nodes == set_nodes;
  });
  if (known == sets_.end()) {
    // Every daemon splits here, at the same response: members by node index.
    std::string label = "of process set " + std::to_string(r.process_set_id) + " among its daemons";
    auto split = whole->split(!out.outside, 0, self, label, waitFor(access));
    if (!split.isOk()) {
      failed_ = true;  // the rest of the job stages through host memory
      return Status(split.status().code(), "tensor '" + r.name + "' of process set " +
                                               std::to_string(r.process_set_id) + ": " + split.status().message());
    }
    if (!out.outside) GS_LOG(gpu, info, "NCCL communicator {} formed ({} daemons)", label, set_nodes.size());
    if (sets_.size() >= kMaxSetComms) sets_.pop_back();  // the least recently used
    sets_.insert(sets_.begin(), SetComm{r.process_set_id, set_nodes, std::move(split).value()});
  } else {
    std::rotate(sets_.begin(), known, known + 1);
  }
  out.comm = sets_.front().comm.get();
  return out;
}

}  // namespace gradsync::executor
