// SPDX-License-Identifier: Apache-2.0
// Runs negotiated collectives among the ranks of one node, reading and
// writing their arenas in place (zero copy) with the reduce pool.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
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
  explicit CpuExecutor(ReducePool* pool, DeviceExecutor* gpu = nullptr) : pool_(pool), gpu_(gpu) {}

  // Executes every response of `fused`; results are parallel to
  // fused.responses. Responses that carry an error are returned as is.
  std::vector<ResponseResult> run(const fusion::FusedResponse& fused, RankAccess& access);

 private:
  // One response that is not an allreduce bucket, by its type: among the
  // daemons of a job across nodes, or on this one.
  ResponseResult runAcrossNodes(const Response& r, RankAccess& access);
  ResponseResult runOnNode(const Response& r, RankAccess& access);
  Status allreduce(const std::vector<const Response*>& responses, RankAccess& access);
  std::vector<ResponseResult> relayWithoutGpu(const fusion::FusedResponse& fused, RankAccess& access);
  // Multi-node allreduce of a fused response: large tensors with one rank
  // per node each get a ring of their own, the rest one fused ring.
  Status hierarchicalAllreduce(const std::vector<const Response*>& responses, RankAccess& access);
  // One ring for `responses`: the local ranks reduced into the fusion
  // buffer around it, or in place where one local rank holds the only one.
  Status fusedAllreduce(const std::vector<const Response*>& responses, RankAccess& access);
  Status inPlaceAllreduce(const Response& response, const coordinator::Request& request, RankAccess& access);
  ResponseResult multiNodeBroadcast(const Response& r, RankAccess& access);
  ResponseResult multiNodeAllgather(const Response& r, RankAccess& access);
  // Adasum: every rank's tensor (across nodes: allgathered first) combined
  // in rank order by reduce::adasum, the result written to the local ranks.
  ResponseResult adasumAllreduce(const Response& r, RankAccess& access);
  ResponseResult multiNodeReducescatter(const Response& r, RankAccess& access);
  ResponseResult multiNodeAlltoall(const Response& r, RankAccess& access);
  ResponseResult broadcast(const Response& r, RankAccess& access);
  ResponseResult allgather(const Response& r, RankAccess& access);
  ResponseResult alltoall(const Response& r, RankAccess& access);
  ResponseResult reducescatter(const Response& r, RankAccess& access);

  ReducePool* pool_;
  DeviceExecutor* gpu_;
  std::vector<uint8_t> fusion_;  // grown once, reused (never re-faulted per call)
};

}  // namespace gradsync::executor
