// SPDX-License-Identifier: Apache-2.0
// A job's NCCL communicators over this node's GPUs, held whole by the
// daemon (one rank per GPU, driven with grouped calls): one per set of GPUs
// the job's collectives used (its ranks', a process set's), formed fresh
// at first use (a split would only spare a bootstrap inside one process)
// and kept, at most kMaxComms, the least recently used dropped. After a
// failure the job's GPUs combine through host memory.
#pragma once

#include <memory>
#include <vector>

#include "base/dtype.h"
#include "daemon/gpu/nccl_comm.h"

namespace gradsync::executor {

class NodeGpuComms {
 public:
  // `nccl`: null without NCCL (or disabled).
  NodeGpuComms(gpu::DeviceOps* ops, const gpu::NcclLibrary* nccl) : ops_(ops), nccl_(nccl) {}

  // The communicator over `devices`; null without NCCL, after a failure, or
  // for a dtype NCCL lacks.
  StatusOr<gpu::NcclComm*> over(const std::vector<int>& devices, DataType dtype);
  // An operation on one failed (it aborted): host memory from now.
  void fail() { failed_ = true; }

 private:
  static constexpr size_t kMaxComms = 4;
  gpu::DeviceOps* const ops_;
  const gpu::NcclLibrary* const nccl_;
  std::vector<std::unique_ptr<gpu::NcclComm>> comms_;  // the most recently used first
  bool failed_ = false;
};

}  // namespace gradsync::executor
