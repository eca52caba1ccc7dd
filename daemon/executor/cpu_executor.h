// SPDX-License-Identifier: Apache-2.0
// Runs negotiated collectives: among the ranks of one node, reading and
// writing their arenas in place (zero copy) with the reduce pool; across
// daemons through CpuAcrossDaemons; CUDA tensors through the DeviceExecutor.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "daemon/executor/cpu_across_daemons.h"
#include "daemon/executor/rank_access.h"
#include "daemon/executor/reduce_pool.h"
#include "daemon/fusion/fusion_planner.h"

namespace gradsync::executor {

using coordinator::Response;

// Runs fused responses whose tensors live on a device (CUDA).
class DeviceExecutor {
 public:
  virtual ~DeviceExecutor() = default;
  virtual std::vector<ResponseResult> run(const fusion::FusedResponse& fused, RankAccess& access) = 0;
};

class CpuExecutor {
 public:
  // `gpu` (null on a node without GPUs) takes the responses of CUDA tensors.
  explicit CpuExecutor(ReducePool* pool, DeviceExecutor* gpu = nullptr) : pool_(pool), gpu_(gpu), across_(pool) {}

  // Executes every response of `fused`; results are parallel to
  // fused.responses. Responses that carry an error are returned as is.
  std::vector<ResponseResult> run(const fusion::FusedResponse& fused, RankAccess& access);

 private:
  // One response of one node that is not an allreduce bucket, by its type.
  ResponseResult runOnNode(const Response& r, RankAccess& access);
  Status allreduce(const std::vector<const Response*>& responses, RankAccess& access);
  ResponseResult broadcast(const Response& r, RankAccess& access);
  ResponseResult allgather(const Response& r, RankAccess& access);
  ResponseResult alltoall(const Response& r, RankAccess& access);
  ResponseResult reducescatter(const Response& r, RankAccess& access);

  ReducePool* pool_;
  DeviceExecutor* gpu_;
  CpuAcrossDaemons across_;  // jobs across daemons, and Adasum
};

}  // namespace gradsync::executor
