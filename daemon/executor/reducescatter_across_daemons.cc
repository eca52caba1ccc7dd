// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/reducescatter_across_daemons.h"

#include <algorithm>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"

namespace gradsync::executor {

ResponseResult ReducescatterAcrossDaemons::reducescatter(const Response& r, RankAccess& access) {
  auto resolved = gpus_->resolveByDevice(r, access);
  if (!resolved.isOk()) return failed(r, resolved.status());
  const Request& first = r.first();
  if (first.length > 0) {  // every node decides alike
    auto nodes = daemons_->forResponse(r, access, daemons_->leadDevice(JobGpus::firstDevice(*resolved)), first.dtype);
    if (!nodes.isOk()) return failed(r, nodes.status());
    if (nodes->outside) return failed(r, okStatus());  // a process set with no rank here
    if (nodes->comm != nullptr) return ncclReducescatter(r, access, nodes->comm, std::move(resolved).value());
  }
  const std::vector<Members>& groups = *resolved;
  if (Status valid = checkReduction(r.name, first); !valid.isOk()) return failed(r, valid);
  const size_t count = first.length / elementSize(first.dtype);
  const ReduceOp ring_op = first.op == v1::AVERAGE ? v1::SUM : first.op;
  const std::vector<int64_t> rows = reducescatterRows(r);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  std::vector<std::vector<size_t>> index;
  for (const auto& group : groups) {
    index.push_back(JobGpus::memberIndices(r, group));
    if (Status ok = JobGpus::checkOutputs(r, group, JobGpus::localBytes(group, index.back(), layout.bytes));
        !ok.isOk()) {
      return failed(r, ok);
    }
  }
  uint8_t* host = gpus_->staging(std::max<size_t>(first.length, 1));
  if (groups.empty() || groups.front().device < 0) {  // no local rank holds memory: identities into the ring
    fillIdentity(host, count, first.dtype, ring_op);
    Status status = access.dataPlane().reduceScatter(nodesOf(r, access), host, host, first.dtype, ring_op,
                                                     reducescatterOwned(r, rows, access));
    return status.isOk() ? result : failed(r, status);
  }
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  Status status = reducescatterThroughHost(r, access, groups, index, rows, host, &waited);
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  status = gpus_->drainStaging(groups, status);
  return status.isOk() ? result : failed(r, status);
}

Status ReducescatterAcrossDaemons::reducescatterThroughHost(const Response& r, RankAccess& access,
                                                            const std::vector<Members>& groups,
                                                            const std::vector<std::vector<size_t>>& index,
                                                            const std::vector<int64_t>& rows, uint8_t* host,
                                                            size_t* waited) {
  const Request& first = r.first();
  const ReduceOp ring_op = first.op == v1::AVERAGE ? v1::SUM : first.op;
  // 1. The node's ranks reduced on their GPUs (prescale, no average yet),
  //    then the GPUs combined into the first one's buffer.
  ASSIGN_OR_RETURN(std::vector<void*> fused, node_gpus_->reduceEachGpu(r, groups, ring_op, waited));
  if (groups.size() > 1) RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, fused, first.length, ring_op, -1, access));
  const Members& lead = groups.front();
  RETURN_IF_ERROR(ops_->select(lead.device));
  {
    PhaseScope phase(access, "MEMCPY_DEVICE_TO_HOST");
    RETURN_IF_ERROR(ops_->waitStream(lead.stream, "waiting for the local reduction"));
    RETURN_IF_ERROR(context(ops_->copy(host, fused.front(), first.length, gpu::CopyKind::kDeviceToHost, lead.stream),
                            "copy to the staging buffer"));
  }
  // 2. Among the nodes, a ring reduce-scatter (as on the CPU path): this
  //    node's ranks' rows come back reduced over every node.
  RETURN_IF_ERROR(access.dataPlane().reduceScatter(nodesOf(r, access), host, host, first.dtype, ring_op,
                                                   reducescatterOwned(r, rows, access)));
  // 3. To each GPU, and each local rank's rows, with the average and postscale.
  PhaseScope phase(access, "MEMCPY_HOST_TO_DEVICE");
  for (size_t g = 0; g < groups.size(); ++g) {
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    RETURN_IF_ERROR(context(ops_->copy(fused[g], host, first.length, gpu::CopyKind::kHostToDevice, groups[g].stream),
                            "copy from the staging buffer"));
    RETURN_IF_ERROR(node_gpus_->scatterRows(r, groups[g], index[g], rows, static_cast<const uint8_t*>(fused[g])));
  }
  return okStatus();
}

ResponseResult ReducescatterAcrossDaemons::ncclReducescatter(const Response& r, RankAccess& access, gpu::NcclComm* comm,
                                                             std::vector<Members> resolved) {
  const Request& first = r.first();
  if (Status valid = checkReduction(r.name, first); !valid.isOk()) return failed(r, valid);
  const ReduceOp across = first.op == v1::AVERAGE ? v1::SUM : first.op;  // the average comes last
  const std::vector<int64_t> rows = reducescatterRows(r);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  auto arranged = gpus_->withLead(std::move(resolved), comm->devices().front());
  if (!arranged.isOk()) return failed(r, arranged.status());
  const std::vector<Members>& groups = *arranged;
  if (groups.empty() || groups.front().device < 0) {
    return failed(r, internalError("tensor '" + r.name + "': this node's ranks have no memory for the reducescatter"));
  }
  // The lead GPU (the daemons' communicator's) may hold none of this job's
  // ranks: it then takes the other GPUs' sum.
  const size_t with_ranks = groups.front().list.empty() ? 1 : 0;
  size_t waited = 0;
  Status status = [&]() -> Status {
    ASSIGN_OR_RETURN(const std::vector<std::vector<size_t>> index, JobGpus::checkedIndices(r, groups, layout.bytes));
    ASSIGN_OR_RETURN(std::vector<void*> fused, node_gpus_->reduceEachGpu(r, groups, across, &waited));
    if (groups.size() - with_ranks > 1) {
      const std::vector<Members> ranked(groups.begin() + with_ranks, groups.end());
      RETURN_IF_ERROR(node_gpus_->acrossGpus(r, ranked, {fused.begin() + with_ranks, fused.end()}, first.length, across,
                                             -1, access));
    }
    const Members& lead = groups.front();
    if (with_ranks > 0) {  // a peer copy once the sum is there
      RETURN_IF_ERROR(ops_->select(groups[1].device));
      RETURN_IF_ERROR(ops_->waitStream(groups[1].stream, "waiting for the local reduction"));
      RETURN_IF_ERROR(ops_->select(lead.device));
      RETURN_IF_ERROR(ops_->copy(fused[0], fused[1], first.length, gpu::CopyKind::kDeviceToDevice, lead.stream));
    }
    RETURN_IF_ERROR(ops_->select(lead.device));
    {
      // allReduce waits for the stream: the phase covers the local reduction too.
      PhaseScope phase(access, "NCCL_ALLREDUCE");
      Status reduced = comm->allReduce({fused[0]}, first.length / elementSize(first.dtype), first.dtype, across,
                                       {lead.stream}, DaemonComms::waitFor(access));
      if (!reduced.isOk()) reduced = daemons_->fail(reduced, access);
      RETURN_IF_ERROR(context(reduced, "tensor '" + r.name + "'"));
    }
    if (groups.size() > 1) RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, fused, first.length, v1::SUM, 0, access));
    for (size_t g = with_ranks; g < groups.size(); ++g) {  // each rank's rows, with the average and postscale
      RETURN_IF_ERROR(ops_->select(groups[g].device));
      RETURN_IF_ERROR(node_gpus_->scatterRows(r, groups[g], index[g], rows, static_cast<const uint8_t*>(fused[g])));
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return status.isOk() ? result : failed(r, status);
}

}  // namespace gradsync::executor
