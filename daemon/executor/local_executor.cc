// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/local_executor.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/common/dtype.h"
#include "daemon/executor/copy_plan.h"

namespace gradsync::executor {
namespace {

using coordinator::Request;

// Bytes below which a reduction runs on the calling thread alone: waking a
// worker costs more than it saves.
constexpr size_t kParallelBytes = 256 << 10;
// Smallest piece of a reduction handed to one thread.
constexpr size_t kMinShardBytes = 128 << 10;

// One reduction with its own pointer arrays (ReduceArgs points into them).
struct Reduction {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  reduce::ReduceArgs args;
  size_t count = 0;

  void bind() {
    args.inputs = inputs.data();
    args.num_inputs = static_cast<int>(inputs.size());
    args.outputs = outputs.data();
    args.num_outputs = static_cast<int>(outputs.size());
  }
};

void runReductions(std::vector<Reduction>& reductions, ReducePool& pool) {
  size_t total_bytes = 0;
  for (auto& r : reductions) total_bytes += r.count * elementSize(r.args.dtype);
  if (total_bytes < kParallelBytes || pool.threads() == 1) {
    for (auto& r : reductions) {
      if (r.count > 0) reduce::reduceRange(r.args, 0, r.count);
    }
    return;
  }
  struct Shard {
    size_t reduction, begin, end;
  };
  const size_t target = std::max(kMinShardBytes, total_bytes / (static_cast<size_t>(pool.threads()) * 4));
  std::vector<Shard> shards;
  for (size_t i = 0; i < reductions.size(); ++i) {
    const size_t esize = elementSize(reductions[i].args.dtype);
    const size_t step = std::max<size_t>(1, target / esize);
    for (size_t begin = 0; begin < reductions[i].count; begin += step) {
      shards.push_back({i, begin, std::min(reductions[i].count, begin + step)});
    }
  }
  pool.forEachShard(shards.size(), [&](size_t s) {
    const Shard& shard = shards[s];
    reduce::reduceRange(reductions[shard.reduction].args, shard.begin, shard.end);
  });
}

StatusOr<uint8_t*> inputOf(RankAccess& access, const Request& request) {
  const handoff::ShmArena* arena = access.arena(request.rank);
  if (arena == nullptr) return unavailable("rank " + std::to_string(request.rank) + " left during the collective");
  return arena->range(request.offset, request.length);
}

size_t rowBytes(const Request& r) {
  size_t row = elementSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) row *= static_cast<size_t>(r.shape[d]);
  return row;
}

std::vector<int64_t> withFirstDim(const std::vector<int64_t>& shape, int64_t rows) {
  std::vector<int64_t> out = shape;
  if (out.empty()) out.push_back(rows); else out[0] = rows;
  return out;
}

// Fills `count` elements with the identity of `op` (what a node without
// contributing ranks adds to the ring: 0 for sums, 1 for products, the
// largest value for MIN, the smallest for MAX).
template <typename T>
void fillWith(void* data, size_t count, T value) {
  std::fill(static_cast<T*>(data), static_cast<T*>(data) + count, value);
}

template <typename T>
void fillIdentityOf(void* data, size_t count, ReduceOp op) {
  if (op == v1::MIN) {
    fillWith<T>(data, count, std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                   : std::numeric_limits<T>::max());
  } else if (op == v1::MAX) {
    fillWith<T>(data, count, std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                   : std::numeric_limits<T>::lowest());
  } else {
    fillWith<T>(data, count, static_cast<T>(op == v1::PRODUCT ? 1 : 0));
  }
}

void fillIdentity(void* data, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case v1::UINT8: return fillIdentityOf<uint8_t>(data, count, op);
    case v1::INT8: return fillIdentityOf<int8_t>(data, count, op);
    case v1::UINT16: return fillIdentityOf<uint16_t>(data, count, op);
    case v1::INT16: return fillIdentityOf<int16_t>(data, count, op);
    case v1::INT32: return fillIdentityOf<int32_t>(data, count, op);
    case v1::INT64: return fillIdentityOf<int64_t>(data, count, op);
    case v1::FLOAT32: return fillIdentityOf<float>(data, count, op);
    case v1::FLOAT64: return fillIdentityOf<double>(data, count, op);
    case v1::BOOL: return fillWith<uint8_t>(data, count, op == v1::MIN ? 1 : 0);  // and / or
    case v1::FLOAT16:
      return fillWith<uint16_t>(data, count, op == v1::MIN ? 0x7C00 : op == v1::MAX ? 0xFC00 : op == v1::PRODUCT ? 0x3C00 : 0);
    case v1::BFLOAT16:
      return fillWith<uint16_t>(data, count, op == v1::MIN ? 0x7F80 : op == v1::MAX ? 0xFF80 : op == v1::PRODUCT ? 0x3F80 : 0);
    default: return;
  }
}

ResponseResult failed(const Response& r, Status status) {
  ResponseResult result;
  result.status = std::move(status);
  result.members.resize(r.ranks.size());
  return result;
}

}  // namespace

std::vector<ResponseResult> LocalExecutor::run(const fusion::FusedResponse& fused, RankAccess& access) {
  std::vector<ResponseResult> results;
  const Response& head = fused.responses.front();
  if (head.status.isOk() && head.type == v1::ALLREDUCE) {
    std::vector<const Response*> all;
    for (const auto& r : fused.responses) all.push_back(&r);
    Status status = access.multiNode() ? hierarchicalAllreduce(all, access) : allreduce(all, access);
    for (const auto& r : fused.responses) results.push_back(failed(r, status));
    return results;
  }
  for (const auto& r : fused.responses) {
    if (!r.status.isOk()) {
      results.push_back(failed(r, r.status));
      continue;
    }
    if (access.multiNode()) {
      if (r.type == v1::BROADCAST) {
        results.push_back(multiNodeBroadcast(r, access));
      } else if (r.type == v1::ALLGATHER) {
        results.push_back(multiNodeAllgather(r, access));
      } else if (r.type == v1::REDUCESCATTER) {
        results.push_back(multiNodeReducescatter(r, access));
      } else if (r.type == v1::ALLTOALL) {
        results.push_back(multiNodeAlltoall(r, access));
      } else if (r.type == v1::BARRIER || r.type == v1::JOIN) {
        results.push_back(failed(r, okStatus()));  // the negotiation across all ranks was the synchronisation
      } else {
        results.push_back(failed(r, unimplemented("tensor '" + r.name + "': " + collectiveName(r.type) +
                                                  " across nodes is not implemented yet")));
      }
      continue;
    }
    switch (r.type) {
      case v1::BROADCAST: results.push_back(broadcast(r, access)); break;
      case v1::ALLGATHER: results.push_back(allgather(r, access)); break;
      case v1::ALLTOALL: results.push_back(alltoall(r, access)); break;
      case v1::REDUCESCATTER: results.push_back(reducescatter(r, access)); break;
      case v1::ALLREDUCE: results.push_back(failed(r, allreduce({&r}, access))); break;
      default: results.push_back(failed(r, okStatus())); break;  // BARRIER, JOIN: no data
    }
  }
  return results;
}

Status LocalExecutor::allreduce(const std::vector<const Response*>& responses, RankAccess& access) {
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
  runReductions(reductions, *pool_);
  return okStatus();
}

Status LocalExecutor::hierarchicalAllreduce(const std::vector<const Response*>& responses, RankAccess& access) {
  const Request& first = responses.front()->first();
  const size_t esize = elementSize(first.dtype);
  if (responses.size() == 1) {
    // One tensor held by one local rank: run the ring on its buffer in place
    // (no copies through the fusion buffer).
    const Request* only = nullptr;
    int local = 0;
    for (const auto& request : responses.front()->requests) {
      if (request && access.isLocal(request->rank)) {
        only = &*request;
        ++local;
      }
    }
    if (local == 1) return inPlaceAllreduce(*responses.front(), *only, access);
  }
  size_t total = 0;
  for (const Response* r : responses) total += r->first().length / esize;
  if (fusion_.size() < total * esize) fusion_.resize(total * esize);
  // 1. Local ranks into the fusion buffer (prescale applied, no average yet).
  std::vector<Reduction> gather(responses.size());
  std::vector<Reduction> scatter(responses.size());
  size_t offset = 0;
  for (size_t t = 0; t < responses.size(); ++t) {
    const Response& r = *responses[t];
    const size_t count = r.first().length / esize;
    uint8_t* slot = fusion_.data() + offset * esize;
    for (const auto& request : r.requests) {
      if (!request || !access.isLocal(request->rank)) continue;
      ASSIGN_OR_RETURN(uint8_t * data, inputOf(access, *request));
      gather[t].inputs.push_back(data);
      scatter[t].outputs.push_back(data);
    }
    // No contributing local rank (all joined, or none in the process set).
    if (gather[t].inputs.empty()) fillIdentity(slot, count, first.dtype, first.op);
    gather[t].outputs.push_back(slot);
    gather[t].args.dtype = first.dtype;
    gather[t].args.op = first.op == v1::AVERAGE ? v1::SUM : first.op;
    gather[t].args.prescale = first.prescale;
    gather[t].count = gather[t].inputs.empty() ? 0 : count;
    gather[t].bind();
    // 3. Back to the local ranks, with the average and postscale.
    scatter[t].inputs.push_back(slot);
    scatter[t].args.dtype = first.dtype;
    scatter[t].args.op = first.op;
    scatter[t].args.postscale = first.postscale;
    scatter[t].args.average_divisor = static_cast<int>(r.ranks.size());
    scatter[t].count = scatter[t].outputs.empty() ? 0 : count;
    scatter[t].bind();
    offset += count;
  }
  runReductions(gather, *pool_);
  // 2. Among the nodes.
  RETURN_IF_ERROR(access.crossNodeAllreduce(fusion_.data(), total, first.dtype,
                                            first.op == v1::AVERAGE ? v1::SUM : first.op));
  runReductions(scatter, *pool_);
  return okStatus();
}

Status LocalExecutor::inPlaceAllreduce(const Response& response, const Request& request, RankAccess& access) {
  ASSIGN_OR_RETURN(uint8_t * data, inputOf(access, request));
  const size_t count = request.length / elementSize(request.dtype);
  auto scale = [&](ReduceOp op, double prescale, double postscale, int divisor) {
    std::vector<Reduction> one(1);
    one[0].inputs.push_back(data);
    one[0].outputs.push_back(data);
    one[0].args.dtype = request.dtype;
    one[0].args.op = op;
    one[0].args.prescale = prescale;
    one[0].args.postscale = postscale;
    one[0].args.average_divisor = divisor;
    one[0].count = count;
    one[0].bind();
    runReductions(one, *pool_);
  };
  if (request.prescale != 1.0) scale(v1::SUM, request.prescale, 1.0, 1);
  RETURN_IF_ERROR(access.crossNodeAllreduce(data, count, request.dtype, request.op == v1::AVERAGE ? v1::SUM : request.op));
  if (request.op == v1::AVERAGE || request.postscale != 1.0) {
    scale(request.op == v1::AVERAGE ? v1::AVERAGE : v1::SUM, 1.0, request.postscale, static_cast<int>(response.ranks.size()));
  }
  return okStatus();
}

ResponseResult LocalExecutor::multiNodeBroadcast(const Response& r, RankAccess& access) {
  const Request& first = r.first();
  std::vector<uint8_t*> local;
  uint8_t* landing = nullptr;
  for (const auto& request : r.requests) {
    if (!request || !access.isLocal(request->rank)) continue;
    auto data = inputOf(access, *request);
    if (!data.isOk()) return failed(r, data.status());
    local.push_back(*data);
    if (request->rank == first.root_rank) landing = *data;  // the root's own buffer
  }
  if (local.empty()) return failed(r, okStatus());
  if (landing == nullptr) landing = local.front();
  Status status = access.crossNodeBroadcast(landing, first.length, first.root_rank);
  if (!status.isOk()) return failed(r, status);
  CopyPlan plan;
  for (uint8_t* dst : local) plan.add(dst, landing, first.length);
  plan.run(*pool_);
  return failed(r, okStatus());
}

// Every rank's input is gathered on every node, then each local rank picks
// the blocks sent to it: n_nodes times the traffic of a pairwise exchange,
// kept simple for now (the result is exact).
ResponseResult LocalExecutor::multiNodeAlltoall(const Response& r, RankAccess& access) {
  const size_t n = r.ranks.size();
  const size_t row = rowBytes(r.first());
  std::vector<size_t> input_offset(n);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    input_offset[i] = total;
    total += r.requests[i]->length;
  }
  if (fusion_.size() < total) fusion_.resize(total);
  std::vector<std::vector<collective::Range>> owned(access.nodeCount());
  CopyPlan in;
  for (size_t i = 0; i < n; ++i) {
    const Request& request = *r.requests[i];
    owned[access.nodeOf(request.rank)].push_back({input_offset[i], request.length});
    if (!access.isLocal(request.rank)) continue;
    auto src = inputOf(access, request);
    if (!src.isOk()) return failed(r, src.status());
    in.add(fusion_.data() + input_offset[i], *src, request.length);
  }
  in.run(*pool_);
  Status status = access.crossNodeAllgather(fusion_.data(), owned);
  if (!status.isOk()) return failed(r, status);
  ResponseResult result = failed(r, okStatus());
  std::vector<uint64_t> bytes(n);
  std::vector<std::vector<int64_t>> shapes(n);
  for (size_t j = 0; j < n; ++j) {
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      result.members[j].received_splits.push_back(r.requests[i]->splits[j]);
      rows += r.requests[i]->splits[j];
    }
    bytes[j] = rows * row;
    shapes[j] = withFirstDim(r.first().shape, rows);
    result.members[j].output_shape = shapes[j];
  }
  auto outputs = access.requestOutputs(r, bytes, shapes);
  if (!outputs.isOk()) return failed(r, outputs.status());
  CopyPlan out;
  for (size_t j = 0; j < n; ++j) {
    if ((*outputs)[j] == nullptr) continue;  // another node's rank
    size_t written = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t skip = 0;
      for (size_t k = 0; k < j; ++k) skip += r.requests[i]->splits[k] * row;
      const size_t len = r.requests[i]->splits[j] * row;
      out.add((*outputs)[j] + written, fusion_.data() + input_offset[i] + skip, len);
      written += len;
    }
  }
  out.run(*pool_);
  return result;
}

ResponseResult LocalExecutor::multiNodeAllgather(const Response& r, RankAccess& access) {
  const size_t row = rowBytes(r.first());
  std::vector<std::vector<collective::Range>> owned(access.nodeCount());
  std::vector<std::pair<const Request*, size_t>> local;  // request, offset
  size_t offset = 0;
  int64_t total_rows = 0;
  for (const auto& request : r.requests) {
    owned[access.nodeOf(request->rank)].push_back({offset, request->length});
    if (access.isLocal(request->rank)) local.emplace_back(&*request, offset);
    offset += request->length;
    total_rows += request->shape.empty() ? 1 : request->shape[0];
  }
  if (fusion_.size() < offset) fusion_.resize(offset);
  CopyPlan in;
  for (const auto& [request, at] : local) {
    auto src = inputOf(access, *request);
    if (!src.isOk()) return failed(r, src.status());
    in.add(fusion_.data() + at, *src, request->length);
  }
  in.run(*pool_);
  Status status = access.crossNodeAllgather(fusion_.data(), owned);
  if (!status.isOk()) return failed(r, status);
  const auto shape = withFirstDim(r.first().shape, total_rows);
  const size_t members = r.ranks.size();
  auto outputs = access.requestOutputs(r, std::vector<uint64_t>(members, total_rows * row),
                                       std::vector<std::vector<int64_t>>(members, shape));
  if (!outputs.isOk()) return failed(r, outputs.status());
  CopyPlan out;
  for (uint8_t* dst : *outputs) {
    if (dst != nullptr) out.add(dst, fusion_.data(), offset);
  }
  out.run(*pool_);
  ResponseResult result = failed(r, okStatus());
  for (auto& m : result.members) m.output_shape = shape;
  return result;
}

// Reduce-scatter across nodes as a full allreduce into the fusion buffer
// (inputs stay untouched), then each local rank takes its rows: twice the
// ring traffic of a true ring reduce-scatter, kept simple for now.
ResponseResult LocalExecutor::multiNodeReducescatter(const Response& r, RankAccess& access) {
  const Request& first = r.first();
  const size_t esize = elementSize(first.dtype);
  const size_t count = first.length / esize;
  if (fusion_.size() < first.length) fusion_.resize(first.length);
  std::vector<Reduction> gather(1);
  for (const auto& request : r.requests) {
    if (!request || !access.isLocal(request->rank)) continue;
    auto data = inputOf(access, *request);
    if (!data.isOk()) return failed(r, data.status());
    gather[0].inputs.push_back(*data);
  }
  gather[0].outputs.push_back(fusion_.data());
  gather[0].args.dtype = first.dtype;
  gather[0].args.op = first.op == v1::AVERAGE ? v1::SUM : first.op;
  gather[0].args.prescale = first.prescale;
  gather[0].count = gather[0].inputs.empty() ? 0 : count;
  gather[0].bind();
  if (gather[0].inputs.empty()) fillIdentity(fusion_.data(), count, first.dtype, first.op);
  runReductions(gather, *pool_);
  Status status = access.crossNodeAllreduce(fusion_.data(), count, first.dtype,
                                            first.op == v1::AVERAGE ? v1::SUM : first.op);
  if (!status.isOk()) return failed(r, status);
  const size_t n = r.ranks.size();
  const size_t row = rowBytes(first);
  const int64_t dim0 = first.shape.empty() ? 1 : first.shape[0];
  std::vector<int64_t> rows(n, dim0 / static_cast<int64_t>(n));
  for (int64_t j = 0; j < dim0 % static_cast<int64_t>(n); ++j) ++rows[j];
  ResponseResult result = failed(r, okStatus());
  std::vector<uint64_t> bytes(n);
  std::vector<std::vector<int64_t>> shapes(n);
  for (size_t j = 0; j < n; ++j) {
    bytes[j] = rows[j] * row;
    shapes[j] = withFirstDim(first.shape, rows[j]);
    result.members[j].output_shape = shapes[j];
  }
  auto outputs = access.requestOutputs(r, bytes, shapes);
  if (!outputs.isOk()) return failed(r, outputs.status());
  std::vector<Reduction> scatter;
  size_t start = 0;
  for (size_t j = 0; j < n; ++j) {
    if ((*outputs)[j] != nullptr && rows[j] > 0) {
      Reduction out;
      out.inputs.push_back(fusion_.data() + start * row);
      out.outputs.push_back((*outputs)[j]);
      out.args.dtype = first.dtype;
      out.args.op = first.op;
      out.args.postscale = first.postscale;
      out.args.average_divisor = static_cast<int>(n);
      out.count = rows[j] * row / esize;
      scatter.push_back(std::move(out));
    }
    start += rows[j];
  }
  for (auto& s : scatter) s.bind();  // after the vector stopped growing
  runReductions(scatter, *pool_);
  return result;
}

ResponseResult LocalExecutor::broadcast(const Response& r, RankAccess& access) {
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
  plan.run(*pool_);
  return failed(r, okStatus());
}

ResponseResult LocalExecutor::allgather(const Response& r, RankAccess& access) {
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

ResponseResult LocalExecutor::alltoall(const Response& r, RankAccess& access) {
  const size_t n = r.ranks.size();
  const size_t row = rowBytes(r.first());
  ResponseResult result = failed(r, okStatus());
  std::vector<uint64_t> bytes(n);
  std::vector<std::vector<int64_t>> shapes(n);
  for (size_t j = 0; j < n; ++j) {
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      result.members[j].received_splits.push_back(r.requests[i]->splits[j]);
      rows += r.requests[i]->splits[j];
    }
    bytes[j] = rows * row;
    shapes[j] = withFirstDim(r.first().shape, rows);
    result.members[j].output_shape = shapes[j];
  }
  auto outputs = access.requestOutputs(r, bytes, shapes);
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

ResponseResult LocalExecutor::reducescatter(const Response& r, RankAccess& access) {
  const size_t n = r.ranks.size();
  const Request& first = r.first();
  const size_t row = rowBytes(first);
  const size_t row_elements = row / elementSize(first.dtype);
  const int64_t dim0 = first.shape.empty() ? 1 : first.shape[0];
  // Horovod's rule: the first dim0 % n ranks receive one extra row.
  std::vector<int64_t> rows(n, dim0 / static_cast<int64_t>(n));
  for (int64_t j = 0; j < dim0 % static_cast<int64_t>(n); ++j) ++rows[j];
  ResponseResult result = failed(r, okStatus());
  std::vector<uint64_t> bytes(n);
  std::vector<std::vector<int64_t>> shapes(n);
  for (size_t j = 0; j < n; ++j) {
    bytes[j] = rows[j] * row;
    shapes[j] = withFirstDim(first.shape, rows[j]);
    result.members[j].output_shape = shapes[j];
  }
  auto outputs = access.requestOutputs(r, bytes, shapes);
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
