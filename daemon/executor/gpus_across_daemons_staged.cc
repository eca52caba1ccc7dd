// SPDX-License-Identifier: Apache-2.0
// GpusAcrossDaemons for allgather, alltoall and reducescatter of CUDA
// tensors: through host memory and the daemons' ring (alltoall: their
// pairwise exchange), as the CPU executor does them
// (cpu_executor_across_nodes.cc), with the node's ranks copied out of and back
// into their GPU memory, whichever of the node's GPUs they use (the GPUs'
// sums combined first for reducescatter): for process sets, jobs without
// the daemons' NCCL communicator, and after it failed. The whole job's go
// over NCCL (gpus_across_daemons_nccl.cc).
#include <algorithm>
#include <cstring>
#include <map>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpus_across_daemons.h"

namespace gradsync::executor {
namespace {

// Where each request's input lies when every rank's input is laid end to
// end (the ring's buffer), and which node owns which ranges of it.
struct GatherLayout {
  std::vector<size_t> offset;  // parallel to r.requests
  size_t total = 0;
  std::vector<std::vector<collective::Range>> owned;  // per node
};

GatherLayout gatherLayout(const Response& r, RankAccess& access) {
  GatherLayout layout;
  layout.owned.resize(access.dataPlane().nodeCount());
  for (const auto& request : r.requests) {
    layout.offset.push_back(layout.total);
    layout.owned[access.dataPlane().nodeOf(request->rank)].push_back({layout.total, request->length});
    layout.total += request->length;
  }
  return layout;
}

}  // namespace

std::vector<uint64_t> gatheredBytes(const Response& r, ResponseResult* result) {
  if (r.type != v1::ALLGATHER) return alltoallLayout(r, result).bytes;
  int64_t total_rows = 0;
  for (const auto& request : r.requests) total_rows += request->shape.empty() ? 1 : request->shape[0];
  const std::vector<int64_t> gathered_shape = withFirstDim(r.first().shape, total_rows);
  for (auto& member : result->members) member.output_shape = gathered_shape;
  return std::vector<uint64_t>(r.requests.size(), total_rows * rowBytes(r.first()));
}

Status GpusAcrossDaemons::stageInputs(const Response& r, const Members& m, const std::vector<size_t>& index,
                                      const std::vector<size_t>& offset, uint8_t* host) {
  if (m.stream == nullptr) return okStatus();  // no local rank holds memory
  RETURN_IF_ERROR(ops_->waitStream(m.stream, "waiting for the job's stream"));
  for (size_t k = 0; k < m.list.size(); ++k) {
    const uint64_t length = r.requests[index[k]]->length;
    if (length == 0) continue;
    RETURN_IF_ERROR(context(
        ops_->copy(host + offset[index[k]], m.list[k].data, length, gpu::CopyKind::kDeviceToHost, m.stream),
        "tensor '" + r.name + "': copy of rank " + std::to_string(m.list[k].rank) + "'s tensor to the staging buffer"));
  }
  return okStatus();
}

ResponseResult GpusAcrossDaemons::gatherLike(const Response& r, RankAccess& access) {
  auto resolved = gpus_->resolveByDevice(r, access);
  if (!resolved.isOk()) return failed(r, resolved.status());
  {  // every node decides alike
    auto nodes = daemons_.forResponse(r, access, leadDevice(*resolved), v1::UINT8);
    if (!nodes.isOk()) return failed(r, nodes.status());
    if (nodes->outside) return failed(r, okStatus());  // a process set with no rank here
    if (nodes->comm != nullptr) return ncclGatherLike(r, access, *nodes, std::move(resolved).value());
  }
  return hostGatherLike(r, access, *resolved);
}

ResponseResult GpusAcrossDaemons::hostGatherLike(const Response& r, RankAccess& access,
                                                 const std::vector<Members>& groups) {
  // (By GPU: each stages through the same host buffer.)
  std::vector<std::vector<size_t>> index;
  for (const auto& group : groups) index.push_back(JobGpus::memberIndices(r, group));
  const GatherLayout layout = gatherLayout(r, access);
  ResponseResult result = failed(r, okStatus());
  const std::vector<uint64_t> out_bytes = gatheredBytes(r, &result);
  Status status = okStatus();
  for (size_t g = 0; status.isOk() && g < groups.size(); ++g) {
    status = JobGpus::checkOutputs(r, groups[g], JobGpus::localBytes(groups[g], index[g], out_bytes));
  }
  // Alltoall: each rank's input at layout.offset, then the messages to the
  // other nodes and from them (a pairwise exchange, as on the CPU path).
  const AlltoallRoutes routes = r.type == v1::ALLTOALL ? alltoallRoutes(r, access) : AlltoallRoutes();
  uint8_t* host = gpus_->staging(std::max<size_t>(layout.total + routes.send_bytes + routes.recv_bytes, 1));
  uint8_t* send = host + layout.total;
  uint8_t* recv = send + routes.send_bytes;
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  for (size_t g = 0; status.isOk() && g < groups.size(); ++g) {
    if (groups[g].device >= 0) status = ops_->select(groups[g].device);
    if (status.isOk()) status = gpus_->waitReady(groups[g]);
    if (status.isOk()) ++waited;
  }
  if (status.isOk()) {
    PhaseScope phase(access, "MEMCPY_DEVICE_TO_HOST");
    for (size_t g = 0; status.isOk() && g < groups.size(); ++g) {
      if (groups[g].device >= 0) status = ops_->select(groups[g].device);
      if (status.isOk()) status = stageInputs(r, groups[g], index[g], layout.offset, host);
    }
  }
  if (status.isOk() && r.type == v1::ALLGATHER)
    status = access.dataPlane().allgather(nodesOf(r, access), host, layout.owned);
  if (status.isOk() && r.type == v1::ALLTOALL)
    status = stagedAlltoallExchange(r, access, groups, routes, layout.offset, host, send, recv);
  if (status.isOk()) {
    PhaseScope phase(access, "MEMCPY_HOST_TO_DEVICE");
    for (size_t g = 0; status.isOk() && g < groups.size(); ++g) {
      if (groups[g].device >= 0) status = ops_->select(groups[g].device);
      if (status.isOk())
        status = copyGatheredOut(r, groups[g], index[g], layout.offset, layout.total, routes, host, recv);
    }
  }
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  status = gpus_->drainStaging(groups, status);
  return status.isOk() ? result : failed(r, status);
}

Status GpusAcrossDaemons::stagedAlltoallExchange(const Response& r, RankAccess& access,
                                                 const std::vector<Members>& groups, const AlltoallRoutes& routes,
                                                 const std::vector<size_t>& offset, const uint8_t* host, uint8_t* send,
                                                 uint8_t* recv) {
  for (const auto& group : groups) {
    if (group.stream != nullptr)
      RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the copies to the staging buffer"));
  }
  size_t at = 0;
  for (const auto& piece : routes.pack) {
    std::memcpy(send + at, host + offset[piece.request] + piece.offset, piece.bytes);
    at += piece.bytes;
  }
  return access.dataPlane().alltoall(nodesOf(r, access), send, routes.send_to, recv, routes.recv_from);
}

Status GpusAcrossDaemons::copyGatheredOut(const Response& r, const Members& m, const std::vector<size_t>& index,
                                          const std::vector<size_t>& offset, size_t total, const AlltoallRoutes& routes,
                                          const uint8_t* host, const uint8_t* recv) {
  for (size_t k = 0; k < m.list.size(); ++k) {
    const std::string what = "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[k].rank);
    if (r.type == v1::ALLGATHER) {
      if (total > 0) {
        RETURN_IF_ERROR(
            context(ops_->copy(m.list[k].output, host, total, gpu::CopyKind::kHostToDevice, m.stream), what));
      }
      continue;
    }
    size_t written = 0;
    for (const auto& piece : routes.output[index[k]]) {
      const uint8_t* from = piece.remote ? recv + piece.offset : host + offset[piece.request] + piece.offset;
      if (piece.bytes > 0) {
        RETURN_IF_ERROR(context(
            ops_->copy(m.list[k].output + written, from, piece.bytes, gpu::CopyKind::kHostToDevice, m.stream), what));
      }
      written += piece.bytes;
    }
  }
  return okStatus();
}

ResponseResult GpusAcrossDaemons::reducescatter(const Response& r, RankAccess& access) {
  auto resolved = gpus_->resolveByDevice(r, access);
  if (!resolved.isOk()) return failed(r, resolved.status());
  const Request& first = r.first();
  if (first.length > 0) {  // every node decides alike
    auto nodes = daemons_.forResponse(r, access, leadDevice(*resolved), first.dtype);
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

Status GpusAcrossDaemons::reducescatterThroughHost(const Response& r, RankAccess& access,
                                                   const std::vector<Members>& groups,
                                                   const std::vector<std::vector<size_t>>& index,
                                                   const std::vector<int64_t>& rows, uint8_t* host, size_t* waited) {
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

}  // namespace gradsync::executor
