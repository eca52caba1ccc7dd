// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/cpu_across_daemons.h"

#include <cstring>
#include <set>

#include "base/dtype.h"
#include "daemon/collective/reduce/adasum.h"
#include "daemon/executor/copy_plan.h"
#include "daemon/executor/executor_util.h"

namespace gradsync::executor {

namespace {
// A fused allreduce's tensors from this size on get a ring of their own
// where no node holds two of their ranks: in place on the one local rank's
// tensor, no copies into and out of the fusion buffer (about 6 GB/s each
// way here, against a ring's fixed cost of some 50-200 us).
constexpr size_t kOwnRingMinBytes = 1 << 20;

// Whether every rank of `response` is on a node of its own. Every node
// computes the same answer, so their rings pair up.
bool oneRankPerNode(const Response& response, RankAccess& access) {
  std::set<int> nodes;
  for (int rank : response.ranks) {
    if (!nodes.insert(access.dataPlane().nodeOf(rank)).second) return false;
  }
  return true;
}
}  // namespace

ResponseResult CpuAcrossDaemons::run(const Response& r, RankAccess& access) {
  switch (r.type) {
    case v1::BROADCAST:
      return broadcast(r, access);
    case v1::ALLGATHER:
      return allgather(r, access);
    case v1::REDUCESCATTER:
      return reducescatter(r, access);
    case v1::ALLTOALL:
      return alltoall(r, access);
    default:
      if (isDataless(r.type)) return failed(r, okStatus());  // the negotiation across all ranks was the synchronisation
      return failed(r, unimplemented("tensor '" + r.name + "': " + collectiveName(r.type) +
                                     " across nodes is not implemented yet"));
  }
}

// CUDA tensors reach a daemon without GPUs only from other nodes (its own
// ranks' were refused at enqueue): it still takes its part in the rings,
// adding identities to allreduces, as for a process set without local ranks.
std::vector<ResponseResult> CpuAcrossDaemons::relayWithoutGpu(const fusion::FusedResponse& fused, RankAccess& access) {
  std::vector<ResponseResult> results;
  const Response& head = fused.responses.front();
  Status status = okStatus();
  if (!access.dataPlane().multiNode()) {
    status = failedPrecondition("tensor '" + head.name + "': CUDA tensors on a daemon without GPU");
  } else if (head.type == v1::ALLREDUCE) {
    const Request& first = head.first();
    const ReduceOp ring_op = first.op == v1::AVERAGE ? v1::SUM : first.op;
    size_t total = 0;
    for (const auto& r : fused.responses) total += r.first().length / elementSize(first.dtype);
    if (fusion_.size() < total * elementSize(first.dtype)) fusion_.resize(total * elementSize(first.dtype));
    fillIdentity(fusion_.data(), total, first.dtype, ring_op);
    status = access.dataPlane().allreduce(nodesOf(head, access), fusion_.data(), total, first.dtype, ring_op);
  } else if (head.type != v1::BROADCAST && !isDataless(head.type)) {
    status = unimplemented("tensor '" + head.name + "': " + collectiveName(head.type) + " of CUDA tensors");
  }
  for (const auto& r : fused.responses) results.push_back(failed(r, r.status.isOk() ? status : r.status));
  return results;
}

Status CpuAcrossDaemons::allreduce(const std::vector<const Response*>& responses, RankAccess& access) {
  if (responses.size() == 1) return fusedAllreduce(responses, access);
  std::vector<const Response*> fused;
  for (const Response* r : responses) {
    if (r->first().length >= kOwnRingMinBytes && oneRankPerNode(*r, access)) {
      RETURN_IF_ERROR(fusedAllreduce({r}, access));
    } else {
      fused.push_back(r);
    }
  }
  return fused.empty() ? okStatus() : fusedAllreduce(fused, access);
}

namespace {

// The request of the only local rank taking part in `r` (null: none, or
// several).
const Request* onlyLocalRequest(const Response& r, const RankAccess& access) {
  const Request* only = nullptr;
  for (const auto& request : r.requests) {
    if (!request || !access.isLocal(request->rank)) continue;
    if (only != nullptr) return nullptr;
    only = &*request;
  }
  return only;
}

}  // namespace

Status CpuAcrossDaemons::fusedAllreduce(const std::vector<const Response*>& responses, RankAccess& access) {
  const Request& first = responses.front()->first();
  const size_t esize = elementSize(first.dtype);
  // One tensor held by one local rank: run the ring on its buffer in place
  // (no copies through the fusion buffer).
  if (const Request* only = responses.size() == 1 ? onlyLocalRequest(*responses.front(), access) : nullptr) {
    return inPlaceAllreduce(*responses.front(), *only, access);
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
  {
    PhaseScope phase(access, "REDUCE_LOCAL_INTO_FUSION_BUFFER");
    runReductions(gather, *pool_);
  }
  // 2. Among the nodes.
  RETURN_IF_ERROR(access.dataPlane().allreduce(nodesOf(*responses.front(), access), fusion_.data(), total, first.dtype,
                                               first.op == v1::AVERAGE ? v1::SUM : first.op));
  PhaseScope phase(access, "MEMCPY_OUT_FUSION_BUFFER");
  runReductions(scatter, *pool_);
  return okStatus();
}

Status CpuAcrossDaemons::inPlaceAllreduce(const Response& response, const Request& request, RankAccess& access) {
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
  RETURN_IF_ERROR(access.dataPlane().allreduce(nodesOf(response, access), data, count, request.dtype,
                                               request.op == v1::AVERAGE ? v1::SUM : request.op));
  if (request.op == v1::AVERAGE || request.postscale != 1.0) {
    scale(request.op == v1::AVERAGE ? v1::AVERAGE : v1::SUM, 1.0, request.postscale,
          static_cast<int>(response.ranks.size()));
  }
  return okStatus();
}

ResponseResult CpuAcrossDaemons::broadcast(const Response& r, RankAccess& access) {
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
  Status status = access.dataPlane().broadcast(nodesOf(r, access), landing, first.length, first.root_rank);
  if (!status.isOk()) return failed(r, status);
  CopyPlan plan;
  for (uint8_t* dst : local) plan.add(dst, landing, first.length);
  plan.run(*pool_);
  return failed(r, okStatus());
}

// Pairwise: each node sends every other node the blocks its ranks have for
// that node's ranks (packed into one message per node), and assembles its
// ranks' outputs from their local blocks and the messages received.
ResponseResult CpuAcrossDaemons::alltoall(const Response& r, RankAccess& access) {
  const AlltoallRoutes routes = alltoallRoutes(r, access);
  std::vector<uint8_t*> inputs(r.requests.size(), nullptr);
  for (size_t i = 0; i < r.requests.size(); ++i) {
    if (!access.isLocal(r.requests[i]->rank)) continue;
    auto src = inputOf(access, *r.requests[i]);
    if (!src.isOk()) return failed(r, src.status());
    inputs[i] = *src;
  }
  if (fusion_.size() < routes.send_bytes + routes.recv_bytes) fusion_.resize(routes.send_bytes + routes.recv_bytes);
  uint8_t* send = fusion_.data();
  uint8_t* recv = fusion_.data() + routes.send_bytes;
  {
    PhaseScope phase(access, "MEMCPY_IN_FUSION_BUFFER");
    CopyPlan pack;
    size_t at = 0;
    for (const auto& piece : routes.pack) {
      pack.add(send + at, inputs[piece.request] + piece.offset, piece.bytes);
      at += piece.bytes;
    }
    pack.run(*pool_);
  }
  Status status = access.dataPlane().alltoall(nodesOf(r, access), send, routes.send_to, recv, routes.recv_from);
  if (!status.isOk()) return failed(r, status);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = alltoallLayout(r, &result);
  auto outputs = access.requestOutputs(r, layout.bytes, layout.shapes);
  if (!outputs.isOk()) return failed(r, outputs.status());
  CopyPlan out;
  for (size_t j = 0; j < r.requests.size(); ++j) {
    if ((*outputs)[j] == nullptr) continue;  // another node's rank
    size_t written = 0;
    for (const auto& piece : routes.output[j]) {
      out.add((*outputs)[j] + written, piece.remote ? recv + piece.offset : inputs[piece.request] + piece.offset,
              piece.bytes);
      written += piece.bytes;
    }
  }
  out.run(*pool_);
  return result;
}

ResponseResult CpuAcrossDaemons::allgather(const Response& r, RankAccess& access) {
  const size_t row = rowBytes(r.first());
  std::vector<std::vector<collective::Range>> owned(access.dataPlane().nodeCount());
  std::vector<std::pair<const Request*, size_t>> local;  // request, offset
  size_t offset = 0;
  int64_t total_rows = 0;
  for (const auto& request : r.requests) {
    owned[access.dataPlane().nodeOf(request->rank)].push_back({offset, request->length});
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
  {
    PhaseScope phase(access, "MEMCPY_IN_FUSION_BUFFER");
    in.run(*pool_);
  }
  Status status = access.dataPlane().allgather(nodesOf(r, access), fusion_.data(), owned);
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

ResponseResult CpuAcrossDaemons::adasum(const Response& r, RankAccess& access) {
  const Request& first = r.first();
  const size_t bytes = first.length;
  std::vector<uint8_t*> inputs;  // overwritten: in place on one node, fusion-buffer copies across nodes
  std::vector<uint8_t*> outputs;
  if (!access.dataPlane().multiNode()) {
    for (const auto& request : r.requests) {
      auto data = inputOf(access, *request);
      if (!data.isOk()) return failed(r, data.status());
      inputs.push_back(*data);
      outputs.push_back(*data);
    }
  } else {
    // Every node needs every rank's tensor (the tree spans the nodes).
    if (fusion_.size() < bytes * r.requests.size()) fusion_.resize(bytes * r.requests.size());
    std::vector<std::vector<collective::Range>> owned(access.dataPlane().nodeCount());
    CopyPlan in;
    for (size_t i = 0; i < r.requests.size(); ++i) {
      const Request& request = *r.requests[i];
      owned[access.dataPlane().nodeOf(request.rank)].push_back({i * bytes, bytes});
      inputs.push_back(fusion_.data() + i * bytes);
      if (!access.isLocal(request.rank)) continue;
      auto data = inputOf(access, request);
      if (!data.isOk()) return failed(r, data.status());
      in.add(fusion_.data() + i * bytes, *data, bytes);
      outputs.push_back(*data);
    }
    in.run(*pool_);
    Status moved = access.dataPlane().allgather(nodesOf(r, access), fusion_.data(), owned);
    if (!moved.isOk()) return failed(r, moved);
  }
  PhaseScope phase(access, "ADASUM_COMBINE");
  return failed(r, reduce::adasum(inputs, bytes / elementSize(first.dtype), first.dtype, first.prescale,
                                  first.postscale, outputs));
}

// Reduce-scatter across nodes as a full allreduce into the fusion buffer
// (inputs stay untouched), then each local rank takes its rows: twice the
// ring traffic of a true ring reduce-scatter, kept simple for now.
ResponseResult CpuAcrossDaemons::reducescatter(const Response& r, RankAccess& access) {
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
  const auto ring_op = first.op == v1::AVERAGE ? v1::SUM : first.op;  // averaged at the end
  // One local rank, unscaled: the ring reads its tensor where it needs
  // this node's contribution (no copy into the fusion buffer).
  const void* contribution = fusion_.data();
  if (gather[0].inputs.size() == 1 && first.prescale == 1.0) {
    contribution = gather[0].inputs[0];
  } else {
    gather[0].outputs.push_back(fusion_.data());
    gather[0].args.dtype = first.dtype;
    gather[0].args.op = ring_op;
    gather[0].args.prescale = first.prescale;
    gather[0].count = gather[0].inputs.empty() ? 0 : count;
    gather[0].bind();
    if (gather[0].inputs.empty()) fillIdentity(fusion_.data(), count, first.dtype, first.op);
    runReductions(gather, *pool_);
  }
  const size_t n = r.ranks.size();
  const size_t row = rowBytes(first);
  const std::vector<int64_t> rows = reducescatterRows(r);
  // Each node needs only its ranks' rows reduced: a ring reduce-scatter,
  // half the traffic of an allreduce.
  Status status = access.dataPlane().reduceScatter(nodesOf(r, access), contribution, fusion_.data(), first.dtype,
                                                   ring_op, reducescatterOwned(r, rows, access));
  if (!status.isOk()) return failed(r, status);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  auto outputs = access.requestOutputs(r, layout.bytes, layout.shapes);
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

}  // namespace gradsync::executor
