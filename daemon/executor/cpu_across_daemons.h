// SPDX-License-Identifier: Apache-2.0
// A job's collectives of CPU tensors across daemons: the local part of each
// around the step among the job's daemons (RankAccess::dataPlane()), in
// the ranks' arenas with the reduce pool; and Adasum (on one node too), and
// the part a daemon without GPUs takes in other nodes' CUDA collectives.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "daemon/executor/rank_access.h"
#include "daemon/executor/reduce_pool.h"
#include "daemon/fusion/fusion_planner.h"

namespace gradsync::executor {

using coordinator::Response;

class CpuAcrossDaemons {
 public:
  explicit CpuAcrossDaemons(ReducePool* pool) : pool_(pool) {}

  // A fused allreduce: large tensors with one rank per node each get a
  // ring of their own, the rest one fused ring.
  Status allreduce(const std::vector<const Response*>& responses, RankAccess& access);
  // One response that is not an allreduce bucket, by its type.
  ResponseResult run(const Response& r, RankAccess& access);
  // Adasum: every rank's tensor (across nodes: allgathered first) combined
  // in rank order by reduce::adasum, the result written to the local ranks.
  ResponseResult adasum(const Response& r, RankAccess& access);
  // CUDA tensors reach a daemon without GPUs only from other nodes (its own
  // ranks' were refused at enqueue): it still takes its part in the rings,
  // adding identities to allreduces, as for a process set without local
  // ranks.
  std::vector<ResponseResult> relayWithoutGpu(const fusion::FusedResponse& fused, RankAccess& access);

 private:
  // One ring for `responses`: the local ranks reduced into the fusion
  // buffer around it, or in place where one local rank holds the only one.
  Status fusedAllreduce(const std::vector<const Response*>& responses, RankAccess& access);
  Status inPlaceAllreduce(const Response& response, const coordinator::Request& request, RankAccess& access);
  ResponseResult broadcast(const Response& r, RankAccess& access);
  ResponseResult allgather(const Response& r, RankAccess& access);
  ResponseResult reducescatter(const Response& r, RankAccess& access);
  ResponseResult alltoall(const Response& r, RankAccess& access);

  ReducePool* const pool_;
  std::vector<uint8_t> fusion_;  // grown once, reused (never re-faulted per call)
};

}  // namespace gradsync::executor
