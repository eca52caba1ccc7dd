// SPDX-License-Identifier: Apache-2.0
// GpuExecutor: its resources, and the collectives among the ranks of one
// node (the collectives across nodes are types of their own: allreduce_across_daemons.h and the others beside it).
#include "daemon/executor/gpu_executor.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"

namespace gradsync::executor {

std::vector<ResponseResult> GpuExecutor::run(const fusion::FusedResponse& fused, RankAccess& access) {
  std::vector<ResponseResult> results;
  const Response& head = fused.responses.front();
  if (head.status.isOk() && head.type == v1::ALLREDUCE && head.first().op == v1::ADASUM) {
    for (const auto& r : fused.responses) results.push_back(adasum_.adasum(r, access));  // one op per bucket
    return results;
  }
  if (access.dataPlane().multiNode() && head.status.isOk() && head.type == v1::ALLREDUCE) {
    return allWith(fused, allreduce_across_.allreduce(responsesOf(fused), access));
  }
  for (const auto& r : fused.responses) results.push_back(r.status.isOk() ? runOne(r, access) : failed(r, r.status));
  return results;
}

ResponseResult GpuExecutor::runOne(const Response& r, RankAccess& access) {
  const bool multi_node = access.dataPlane().multiNode();
  switch (r.type) {
    case v1::ALLREDUCE:
      return failed(r, allreduce(r, access));
    case v1::BROADCAST:
      return failed(r, multi_node ? broadcast_across_.broadcast(r, access) : broadcast(r, access));
    case v1::BARRIER:
    case v1::JOIN:
    case v1::PROCESS_SET_ADD:
    case v1::PROCESS_SET_REMOVE:
      return failed(r, okStatus());
    case v1::ALLGATHER:
      return multi_node ? gather_across_.gatherLike(r, access) : allgather(r, access);
    case v1::ALLTOALL:
      return multi_node ? gather_across_.gatherLike(r, access) : alltoall(r, access);
    case v1::REDUCESCATTER:
      return multi_node ? reducescatter_across_.reducescatter(r, access) : reducescatter(r, access);
    default:
      return failed(r, unimplemented("tensor '" + r.name + "': " + collectiveName(r.type) +
                                     " of CUDA tensors is not implemented yet"));
  }
}

Status GpuExecutor::allreduce(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(std::vector<Members> groups, gpus_.resolveByDevice(r, access));
  const Request& first = r.first();
  RETURN_IF_ERROR(checkReduction(r.name, first));
  if (groups.size() > 1) return node_gpus_.allreduce(r, groups, access);
  Members m = groups.empty() ? Members{} : std::move(groups.front());
  if (m.device < 0 || first.length == 0) return okStatus();  // no elements
  cuda::LocalReduceArgs args;
  args.dtype = static_cast<cuda::Dtype>(first.dtype);
  args.op = static_cast<cuda::Op>(first.op);
  for (size_t k = 0; k < m.list.size(); ++k) {
    args.inputs[k] = m.list[k].data;
    args.outputs[k] = m.list[k].data;
  }
  args.num_inputs = args.num_outputs = static_cast<int>(m.list.size());
  args.count = first.length / elementSize(first.dtype);
  args.prescale = first.prescale;
  args.postscale = first.postscale;
  args.average_divisor = static_cast<int>(r.ranks.size());
  RETURN_IF_ERROR(gpus_.waitReady(m));
  GpuPhaseTimer timer(ops_, access, m.device, m.stream);
  timer.begin("GPU_REDUCE");
  Status reduced = context(ops_->reduce(args, m.stream), "tensor '" + r.name + "'");
  timer.end();
  Status status = gpus_.recordDoneAfter(m, reduced);
  timer.finish();
  return status;
}

Status GpuExecutor::broadcast(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(std::vector<Members> groups, gpus_.resolveByDevice(r, access));
  if (groups.size() > 1) return node_gpus_.broadcast(r, groups, access);
  Members m = groups.empty() ? Members{} : std::move(groups.front());
  if (m.device < 0 || r.first().length == 0) return okStatus();  // no elements
  const int root = r.first().root_rank;
  const uint8_t* source = nullptr;
  for (const auto& member : m.list) {
    if (member.rank == root) source = member.data;
  }
  if (source == nullptr) {
    return failedPrecondition("tensor '" + r.name + "': broadcast root " + std::to_string(root) +
                              " is not on this node");
  }
  RETURN_IF_ERROR(gpus_.waitReady(m));
  GpuPhaseTimer timer(ops_, access, m.device, m.stream);
  timer.begin("GPU_COPY");
  Status status = okStatus();
  for (const auto& member : m.list) {
    if (member.data == source || !status.isOk()) continue;
    status = context(ops_->copy(member.data, source, r.first().length, gpu::CopyKind::kDeviceToDevice, m.stream),
                     "tensor '" + r.name + "': copy to rank " + std::to_string(member.rank));
  }
  timer.end();
  status = gpus_.recordDoneAfter(m, status);
  timer.finish();
  return status;
}

ResponseResult GpuExecutor::allgather(const Response& r, RankAccess& access) {
  auto groups = gpus_.resolveByDevice(r, access);
  if (!groups.isOk()) return failed(r, groups.status());
  if (groups->size() > 1) return node_gpus_.gatherLike(r, *groups, access);
  const Members m = groups->empty() ? Members{} : std::move(groups->front());
  const size_t row = rowBytes(r.first());
  int64_t total_rows = 0;
  for (const auto& request : r.requests) total_rows += request->shape.empty() ? 1 : request->shape[0];
  const auto shape = withFirstDim(r.first().shape, total_rows);
  Status status = JobGpus::checkOutputs(r, m, std::vector<uint64_t>(m.list.size(), total_rows * row));
  bool waited = false;
  if (status.isOk()) {
    status = gpus_.waitReady(m);
    waited = status.isOk();
  }
  GpuPhaseTimer timer(ops_, access, m.device, waited ? m.stream : nullptr);
  timer.begin("GPU_COPY");
  for (size_t j = 0; status.isOk() && j < m.list.size(); ++j) {
    size_t offset = 0;
    for (size_t i = 0; status.isOk() && i < m.list.size(); ++i) {
      const uint64_t length = r.requests[i]->length;
      if (length > 0) {
        status = context(
            ops_->copy(m.list[j].output + offset, m.list[i].data, length, gpu::CopyKind::kDeviceToDevice, m.stream),
            "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[j].rank));
      }
      offset += length;
    }
  }
  timer.end();
  if (waited) status = gpus_.recordDoneAfter(m, status);
  timer.finish();
  ResponseResult result = failed(r, status);
  if (status.isOk()) {
    for (auto& member : result.members) member.output_shape = shape;
  }
  return result;
}

ResponseResult GpuExecutor::alltoall(const Response& r, RankAccess& access) {
  auto groups = gpus_.resolveByDevice(r, access);
  if (!groups.isOk()) return failed(r, groups.status());
  if (groups->size() > 1) return node_gpus_.gatherLike(r, *groups, access);
  const Members m = groups->empty() ? Members{} : std::move(groups->front());
  const size_t n = m.list.size();
  const size_t row = rowBytes(r.first());
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = alltoallLayout(r, &result);
  Status status = JobGpus::checkOutputs(r, m, layout.bytes);
  bool waited = false;
  if (status.isOk()) {
    status = gpus_.waitReady(m);
    waited = status.isOk();
  }
  GpuPhaseTimer timer(ops_, access, m.device, waited ? m.stream : nullptr);
  timer.begin("GPU_COPY");
  std::vector<size_t> written(n, 0);
  for (size_t i = 0; status.isOk() && i < n; ++i) {
    size_t read = 0;
    for (size_t j = 0; status.isOk() && j < n; ++j) {
      const size_t length = r.requests[i]->splits[j] * row;
      if (length > 0) {
        status = context(ops_->copy(m.list[j].output + written[j], m.list[i].data + read, length,
                                    gpu::CopyKind::kDeviceToDevice, m.stream),
                         "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[j].rank));
      }
      written[j] += length;
      read += length;
    }
  }
  timer.end();
  if (waited) status = gpus_.recordDoneAfter(m, status);
  timer.finish();
  return status.isOk() ? result : failed(r, status);
}

ResponseResult GpuExecutor::reducescatter(const Response& r, RankAccess& access) {
  auto groups = gpus_.resolveByDevice(r, access);
  if (!groups.isOk()) return failed(r, groups.status());
  if (groups->size() > 1) return node_gpus_.reducescatter(r, *groups, access);
  const Members m = groups->empty() ? Members{} : std::move(groups->front());
  const Request& first = r.first();
  const size_t row = rowBytes(first);
  const size_t esize = elementSize(first.dtype);
  const std::vector<int64_t> rows = reducescatterRows(r);
  if (Status valid = checkReduction(r.name, first); !valid.isOk()) return failed(r, valid);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  Status status = JobGpus::checkOutputs(r, m, layout.bytes);
  bool waited = false;
  if (status.isOk()) {
    status = gpus_.waitReady(m);
    waited = status.isOk();
  }
  GpuPhaseTimer timer(ops_, access, m.device, waited ? m.stream : nullptr);
  timer.begin("GPU_REDUCE");
  size_t start_row = 0;
  for (size_t j = 0; status.isOk() && j < m.list.size(); ++j) {
    cuda::LocalReduceArgs args;
    args.dtype = static_cast<cuda::Dtype>(first.dtype);
    args.op = static_cast<cuda::Op>(first.op);
    for (size_t k = 0; k < m.list.size(); ++k) args.inputs[k] = m.list[k].data + start_row * row;
    args.num_inputs = static_cast<int>(m.list.size());
    args.outputs[0] = m.list[j].output;
    args.num_outputs = 1;
    args.count = rows[j] * row / esize;
    args.prescale = first.prescale;
    args.postscale = first.postscale;
    args.average_divisor = static_cast<int>(r.ranks.size());
    if (args.count > 0) status = context(ops_->reduce(args, m.stream), "tensor '" + r.name + "'");
    start_row += rows[j];
  }
  timer.end();
  if (waited) status = gpus_.recordDoneAfter(m, status);
  timer.finish();
  return status.isOk() ? result : failed(r, status);
}

}  // namespace gradsync::executor
