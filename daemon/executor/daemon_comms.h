// SPDX-License-Identifier: Apache-2.0
// A job's NCCL communicators among its daemons, held by this daemon's GPU
// executor: the job's (one rank per node, formed on the first CUDA batch
// of an epoch from the id the leader made for it, DataPlane::ncclPeers)
// and, for process sets, communicators split from it. Every node makes the
// same calls in the same order (all daemons run every response), so each
// node decides alike whether NCCL carries a response. After a failure to
// form or a failed operation (the communicator aborted) the job stages
// through host memory until its next epoch. An elastic job's new epoch
// drops the last one's communicators (aborted) and forms new ones; a wait
// in NCCL ends as soon as its batch's epoch is over (waitFor).
#pragma once

#include <memory>
#include <vector>

#include "base/dtype.h"
#include "daemon/coordinator/request.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/gpu_backend.h"
#include "daemon/gpu/nccl_comm.h"

namespace gradsync::executor {

// The daemons' communicator for one response.
struct NodesComm {
  gpu::NcclComm* comm = nullptr;  // null: host staging (or nothing, outside)
  bool outside = false;           // no rank of the set is on this node
  NodeSet nodes;                  // the node of each of its ranks
  int rankOf(int node) const;
};

class DaemonComms {
 public:
  // `nccl`: null without NCCL (or disabled).
  DaemonComms(gpu::DeviceOps* ops, const gpu::NcclLibrary* nccl) : ops_(ops), nccl_(nccl) {}

  // The job's communicator of the batch's epoch, formed on `device` at
  // first use; null when this job cannot use one (no id from the leader, a
  // dtype NCCL lacks, a failure in this epoch so far, an epoch that is
  // over).
  StatusOr<gpu::NcclComm*> forJob(RankAccess& access, int device, DataType dtype);
  // For `r`: the job's for the whole job; for a process set, one split from
  // it (ncclCommSplit, collective over every daemon) holding the set's
  // nodes, made at the set's first response and kept (kMaxSetComms, least
  // recently used dropped alike on every node). `device`: for a new job's
  // communicator.
  StatusOr<NodesComm> forResponse(const Response& r, RankAccess& access, int device, DataType dtype);
  // The limit of an operation of theirs in the batch `access` runs:
  // kStreamWaitLimit, ended early once the batch's epoch is over.
  static gpu::WaitLimit waitFor(const RankAccess& access);
  // An operation on one of them failed with `why` (it aborted) in the
  // batch `access` runs: host staging until the next epoch; a job that is
  // not elastic fails with it. Returns the error to report (the data
  // plane's: led by the job's cause, which the other node may have sent).
  Status fail(const Status& why, RankAccess& access);
  // Formed and not failed.
  bool active() const { return job_ != nullptr && !failed_; }
  // The GPU the job's communicator is on (-1 before it formed).
  int device() const { return device_; }
  // The GPU for the job's communicator: its own once formed, else
  // `first_device` (0 when that is -1).
  int leadDevice(int first_device) const { return device_ >= 0 ? device_ : first_device >= 0 ? first_device : 0; }

 private:
  static constexpr size_t kMaxSetComms = 8;
  struct SetComm {
    int32_t process_set_id;
    NodeSet nodes;
    std::unique_ptr<gpu::NcclComm> comm;  // null where this node is outside the set
  };

  gpu::DeviceOps* const ops_;
  const gpu::NcclLibrary* const nccl_;
  std::unique_ptr<gpu::NcclComm> job_;
  uint64_t epoch_ = 0;  // of job_, sets_ and failed_
  int device_ = -1;
  bool failed_ = false;
  std::vector<SetComm> sets_;  // the most recently used first
};

}  // namespace gradsync::executor
