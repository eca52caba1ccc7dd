// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/cpu_executor.h"

#include "base/dtype.h"
#include "daemon/executor/copy_plan.h"
#include "daemon/executor/executor_util.h"

namespace gradsync::executor {

std::vector<ResponseResult> CpuExecutor::run(const fusion::FusedResponse& fused, RankAccess& access) {
  std::vector<ResponseResult> results;
  const Response& head = fused.responses.front();
  if (head.status.isOk() && head.activeCount() > 0 && head.first().onCuda()) {
    // Fusion never mixes devices: the whole bucket is CUDA.
    if (gpu_ == nullptr) return across_.relayWithoutGpu(fused, access);
    return gpu_->run(fused, access);
  }
  if (head.status.isOk() && head.type == v1::ALLREDUCE && head.first().op == v1::ADASUM) {
    for (const auto& r : fused.responses) results.push_back(across_.adasum(r, access));  // one op per bucket
    return results;
  }
  if (head.status.isOk() && head.type == v1::ALLREDUCE) {
    const auto all = responsesOf(fused);
    return allWith(fused, access.dataPlane().multiNode() ? across_.allreduce(all, access) : allreduce(all, access));
  }
  for (const auto& r : fused.responses) {
    if (!r.status.isOk()) {
      results.push_back(failed(r, r.status));
    } else {
      results.push_back(access.dataPlane().multiNode() ? across_.run(r, access) : runOnNode(r, access));
    }
  }
  return results;
}

ResponseResult CpuExecutor::runOnNode(const Response& r, RankAccess& access) {
  switch (r.type) {
    case v1::BROADCAST:
      return broadcast(r, access);
    case v1::ALLGATHER:
      return allgather(r, access);
    case v1::ALLTOALL:
      return alltoall(r, access);
    case v1::REDUCESCATTER:
      return reducescatter(r, access);
    case v1::ALLREDUCE:
      return failed(r, allreduce({&r}, access));
    default:
      return failed(r, okStatus());  // no data (isDataless)
  }
}

Status CpuExecutor::allreduce(const std::vector<const Response*>& responses, RankAccess& access) {
  std::vector<Reduction> reductions(responses.size());
  for (size_t t = 0; t < responses.size(); ++t) {
    const Response& r = *responses[t];
    Reduction& red = reductions[t];
    for (const auto& request : r.requests) {
      if (!request) continue;
      ASSIGN_OR_RETURN(uint8_t * data, inputOf(access, *request));
      red.inputs.push_back(data);
      red.outputs.push_back(data);
    }
    const Request& first = r.first();
    red.args.dtype = first.dtype;
    red.args.op = first.op;
    red.args.prescale = first.prescale;
    red.args.postscale = first.postscale;
    red.args.average_divisor = static_cast<int>(r.ranks.size());
    red.count = first.length / elementSize(first.dtype);
    red.bind();
    RETURN_IF_ERROR(reduce::validateReduceArgs(red.args));
  }
  PhaseScope phase(access, "REDUCE");
  runReductions(reductions, *pool_);
  return okStatus();
}

ResponseResult CpuExecutor::broadcast(const Response& r, RankAccess& access) {
  const Request* root = nullptr;
  for (const auto& request : r.requests) {
    if (request && request->rank == request->root_rank) root = &*request;
  }
  if (root == nullptr) return failed(r, internalError("broadcast '" + r.name + "' without its root"));
  auto src = inputOf(access, *root);
  if (!src.isOk()) return failed(r, src.status());
  CopyPlan plan;
  for (const auto& request : r.requests) {
    auto dst = inputOf(access, *request);
    if (!dst.isOk()) return failed(r, dst.status());
    plan.add(*dst, *src, root->length);
  }
  PhaseScope phase(access, "MEMCPY");
  plan.run(*pool_);
  return failed(r, okStatus());
}

ResponseResult CpuExecutor::allgather(const Response& r, RankAccess& access) {
  const size_t row = rowBytes(r.first());
  int64_t total_rows = 0;
  for (const auto& request : r.requests) total_rows += request->shape.empty() ? 1 : request->shape[0];
  const auto shape = withFirstDim(r.first().shape, total_rows);
  const size_t members = r.ranks.size();
  auto outputs = access.requestOutputs(r, std::vector<uint64_t>(members, total_rows * row),
                                       std::vector<std::vector<int64_t>>(members, shape));
  if (!outputs.isOk()) return failed(r, outputs.status());
  CopyPlan plan;
  size_t offset = 0;
  for (const auto& request : r.requests) {
    auto src = inputOf(access, *request);
    if (!src.isOk()) return failed(r, src.status());
    for (size_t j = 0; j < members; ++j) plan.add((*outputs)[j] + offset, *src, request->length);
    offset += request->length;
  }
  plan.run(*pool_);
  ResponseResult result = failed(r, okStatus());
  for (auto& m : result.members) m.output_shape = shape;
  return result;
}

ResponseResult CpuExecutor::alltoall(const Response& r, RankAccess& access) {
  const size_t n = r.ranks.size();
  const size_t row = rowBytes(r.first());
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = alltoallLayout(r, &result);
  auto outputs = access.requestOutputs(r, layout.bytes, layout.shapes);
  if (!outputs.isOk()) return failed(r, outputs.status());
  CopyPlan plan;
  std::vector<size_t> written(n, 0);  // bytes already placed in each output
  for (size_t i = 0; i < n; ++i) {
    auto src = inputOf(access, *r.requests[i]);
    if (!src.isOk()) return failed(r, src.status());
    size_t read = 0;
    for (size_t j = 0; j < n; ++j) {
      const size_t len = r.requests[i]->splits[j] * row;
      plan.add((*outputs)[j] + written[j], *src + read, len);
      written[j] += len;
      read += len;
    }
  }
  plan.run(*pool_);
  return result;
}

ResponseResult CpuExecutor::reducescatter(const Response& r, RankAccess& access) {
  const size_t n = r.ranks.size();
  const Request& first = r.first();
  const size_t row = rowBytes(first);
  const size_t row_elements = row / elementSize(first.dtype);
  const std::vector<int64_t> rows = reducescatterRows(r);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  auto outputs = access.requestOutputs(r, layout.bytes, layout.shapes);
  if (!outputs.isOk()) return failed(r, outputs.status());
  std::vector<uint8_t*> inputs;
  for (const auto& request : r.requests) {
    auto src = inputOf(access, *request);
    if (!src.isOk()) return failed(r, src.status());
    inputs.push_back(*src);
  }
  std::vector<Reduction> reductions(n);
  size_t start_row = 0;
  for (size_t j = 0; j < n; ++j) {
    for (uint8_t* in : inputs) reductions[j].inputs.push_back(in + start_row * row);
    reductions[j].outputs.push_back((*outputs)[j]);
    reductions[j].args.dtype = first.dtype;
    reductions[j].args.op = first.op;
    reductions[j].args.prescale = first.prescale;
    reductions[j].args.postscale = first.postscale;
    reductions[j].args.average_divisor = static_cast<int>(n);
    reductions[j].count = rows[j] * row_elements;
    reductions[j].bind();
    start_row += rows[j];
  }
  runReductions(reductions, *pool_);
  return result;
}

}  // namespace gradsync::executor
