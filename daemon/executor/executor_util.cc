// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/executor_util.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/dtype.h"

namespace gradsync::executor {
namespace {

using coordinator::Request;

// Bytes below which a reduction runs on the calling thread alone: waking a
// worker costs more than it saves.
constexpr size_t kParallelBytes = 256 << 10;
// Smallest piece of a reduction handed to one thread.
constexpr size_t kMinShardBytes = 128 << 10;

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
    fillWith<T>(
        data, count,
        std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max());
  } else if (op == v1::MAX) {
    fillWith<T>(
        data, count,
        std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest());
  } else {
    fillWith<T>(data, count, static_cast<T>(op == v1::PRODUCT ? 1 : 0));
  }
}

}  // namespace

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
  if (out.empty())
    out.push_back(rows);
  else
    out[0] = rows;
  return out;
}

void fillIdentity(void* data, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case v1::UINT8:
      return fillIdentityOf<uint8_t>(data, count, op);
    case v1::INT8:
      return fillIdentityOf<int8_t>(data, count, op);
    case v1::UINT16:
      return fillIdentityOf<uint16_t>(data, count, op);
    case v1::INT16:
      return fillIdentityOf<int16_t>(data, count, op);
    case v1::INT32:
      return fillIdentityOf<int32_t>(data, count, op);
    case v1::INT64:
      return fillIdentityOf<int64_t>(data, count, op);
    case v1::FLOAT32:
      return fillIdentityOf<float>(data, count, op);
    case v1::FLOAT64:
      return fillIdentityOf<double>(data, count, op);
    case v1::BOOL:
      return fillWith<uint8_t>(data, count, op == v1::MIN ? 1 : 0);  // and / or
    case v1::FLOAT16:
      return fillWith<uint16_t>(data, count,
                                op == v1::MIN       ? 0x7C00
                                : op == v1::MAX     ? 0xFC00
                                : op == v1::PRODUCT ? 0x3C00
                                                    : 0);
    case v1::BFLOAT16:
      return fillWith<uint16_t>(data, count,
                                op == v1::MIN       ? 0x7F80
                                : op == v1::MAX     ? 0xFF80
                                : op == v1::PRODUCT ? 0x3F80
                                                    : 0);
    default:
      return;
  }
}

ResponseResult failed(const Response& r, Status status) {
  ResponseResult result;
  result.status = std::move(status);
  result.members.resize(r.ranks.size());
  return result;
}

std::vector<const Response*> responsesOf(const fusion::FusedResponse& fused) {
  std::vector<const Response*> all;
  for (const auto& r : fused.responses) all.push_back(&r);
  return all;
}

std::vector<ResponseResult> allWith(const fusion::FusedResponse& fused, const Status& status) {
  std::vector<ResponseResult> results;
  for (const auto& r : fused.responses) results.push_back(failed(r, status));
  return results;
}

OutputLayout alltoallLayout(const Response& r, ResponseResult* result) {
  const size_t n = r.ranks.size();
  const size_t row = rowBytes(r.first());
  OutputLayout layout;
  layout.bytes.resize(n);
  layout.shapes.resize(n);
  for (size_t j = 0; j < n; ++j) {
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      result->members[j].received_splits.push_back(r.requests[i]->splits[j]);
      rows += r.requests[i]->splits[j];
    }
    layout.bytes[j] = rows * row;
    layout.shapes[j] = withFirstDim(r.first().shape, rows);
    result->members[j].output_shape = layout.shapes[j];
  }
  return layout;
}

namespace {

// Rank i's block for rank j: its offset in i's input (local i only).
std::vector<std::vector<size_t>> blockStarts(const Response& r, const std::vector<bool>& local, size_t row) {
  const size_t n = r.requests.size();
  std::vector<std::vector<size_t>> starts(n);
  for (size_t i = 0; i < n; ++i) {
    if (!local[i]) continue;
    starts[i].resize(n);
    for (size_t j = 1; j < n; ++j) starts[i][j] = starts[i][j - 1] + r.requests[i]->splits[j - 1] * row;
  }
  return starts;
}

// Each message's size, then its place: messages lie in node order.
void sizeMessages(const Response& r, size_t row, const std::vector<int>& node, const std::vector<bool>& local,
                  AlltoallRoutes* routes) {
  const size_t n = r.requests.size();
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const size_t bytes = r.requests[i]->splits[j] * row;
      if (local[i] && !local[j]) routes->send_to[node[j]].bytes += bytes;
      if (!local[i] && local[j]) routes->recv_from[node[i]].bytes += bytes;
    }
  }
  for (size_t m = 0; m < routes->send_to.size(); ++m) {
    routes->send_to[m].offset = routes->send_bytes;
    routes->recv_from[m].offset = routes->recv_bytes;
    routes->send_bytes += routes->send_to[m].bytes;
    routes->recv_bytes += routes->recv_from[m].bytes;
  }
}

}  // namespace

AlltoallRoutes alltoallRoutes(const Response& r, const RankAccess& access) {
  const size_t n = r.requests.size();
  const size_t row = rowBytes(r.first());
  const size_t nodes = static_cast<size_t>(access.dataPlane().nodeCount());
  std::vector<int> node(n);
  std::vector<bool> local(n);
  for (size_t i = 0; i < n; ++i) {
    node[i] = access.dataPlane().nodeOf(r.requests[i]->rank);
    local[i] = access.isLocal(r.requests[i]->rank);
  }
  const std::vector<std::vector<size_t>> starts = blockStarts(r, local, row);
  const auto skip = [&](size_t i, size_t j) { return starts[i][j]; };
  const auto length = [&](size_t i, size_t j) { return r.requests[i]->splits[j] * row; };
  AlltoallRoutes routes;
  routes.send_to.assign(nodes, {});
  routes.recv_from.assign(nodes, {});
  routes.output.assign(n, {});
  for (size_t j = 0; j < n; ++j) {
    if (local[j]) routes.output[j].assign(n, {});
  }
  sizeMessages(r, row, node, local, &routes);
  std::vector<size_t> recv_at(nodes);
  for (size_t m = 0; m < nodes; ++m) recv_at[m] = routes.recv_from[m].offset;
  // In message order: sender ranks i, then receiver ranks j.
  std::vector<std::vector<AlltoallRoutes::Piece>> packs(nodes);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const size_t bytes = length(i, j);
      if (local[i] && !local[j]) {
        packs[node[j]].push_back({i, skip(i, j), bytes, false});
      } else if (!local[i] && local[j]) {
        routes.output[j][i] = {i, recv_at[node[i]], bytes, true};
        recv_at[node[i]] += bytes;
      } else if (local[i] && local[j]) {
        routes.output[j][i] = {i, skip(i, j), bytes, false};
      }
    }
  }
  for (auto& pack : packs) routes.pack.insert(routes.pack.end(), pack.begin(), pack.end());
  return routes;
}

std::vector<int64_t> reducescatterRows(const Response& r) {
  const int64_t n = static_cast<int64_t>(r.ranks.size());
  const Request& first = r.first();
  const int64_t dim0 = first.shape.empty() ? 1 : first.shape[0];
  std::vector<int64_t> rows(n, dim0 / n);
  for (int64_t j = 0; j < dim0 % n; ++j) ++rows[j];
  return rows;
}

std::vector<std::vector<collective::ElementRange>> reducescatterOwned(const Response& r,
                                                                      const std::vector<int64_t>& rows,
                                                                      const RankAccess& access) {
  const size_t row_elements = rowBytes(r.first()) / elementSize(r.first().dtype);
  std::vector<std::vector<collective::ElementRange>> owned(access.dataPlane().nodeCount());
  size_t start = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    owned[access.dataPlane().nodeOf(r.ranks[j])].push_back({start * row_elements, rows[j] * row_elements});
    start += rows[j];
  }
  return owned;
}

OutputLayout reducescatterLayout(const Response& r, const std::vector<int64_t>& rows, ResponseResult* result) {
  const size_t row = rowBytes(r.first());
  OutputLayout layout;
  for (size_t j = 0; j < rows.size(); ++j) {
    layout.bytes.push_back(rows[j] * row);
    layout.shapes.push_back(withFirstDim(r.first().shape, rows[j]));
    result->members[j].output_shape = layout.shapes[j];
  }
  return layout;
}

NodeSet nodesOf(const Response& r, const RankAccess& access) {
  NodeSet nodes;
  for (int rank : r.ranks) nodes.push_back(access.dataPlane().nodeOf(rank));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

}  // namespace gradsync::executor
