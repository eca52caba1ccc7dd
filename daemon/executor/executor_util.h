// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the executor's single-node and multi-node paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/executor/rank_access.h"
#include "daemon/executor/reduce_pool.h"
#include "daemon/fusion/fusion_planner.h"

namespace gradsync::executor {

using coordinator::Request;

// One reduction with its own pointer arrays (ReduceArgs points into them;
// call bind() once the arrays are final).
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

// Runs the reductions, split across the pool when they are large.
void runReductions(std::vector<Reduction>& reductions, ReducePool& pool);
// The bytes of `request` in its rank's arena (bounds-checked).
StatusOr<uint8_t*> inputOf(RankAccess& access, const Request& request);
// Bytes of one row (dimension 0 entry) of the request's tensor.
size_t rowBytes(const Request& r);
std::vector<int64_t> withFirstDim(const std::vector<int64_t>& shape, int64_t rows);
// A result for every member of `r` with `status`.
ResponseResult failed(const Response& r, Status status);
// The responses of a fused batch, and one result per response with `status`.
std::vector<const Response*> responsesOf(const fusion::FusedResponse& fused);
std::vector<ResponseResult> allWith(const fusion::FusedResponse& fused, const Status& status);
// Fills `count` elements with the identity of `op` (what a node without
// contributing ranks adds to a ring: 0 for sums, 1 for products, the largest
// value for MIN, the smallest for MAX).
void fillIdentity(void* data, size_t count, DataType dtype, ReduceOp op);
// The nodes holding ranks of `r` (its process set, joined ranks included):
// every node computes the same set from the same response.
NodeSet nodesOf(const Response& r, const RankAccess& access);

// Output sizes and shapes of every member of a collective.
struct OutputLayout {
  std::vector<uint64_t> bytes;
  std::vector<std::vector<int64_t>> shapes;
};
// ALLTOALL: what each member receives; fills received splits and output
// shapes of `result`.
OutputLayout alltoallLayout(const Response& r, ResponseResult* result);
// ALLTOALL across nodes by pairwise exchange: what this node sends each
// other node, what it receives from each, and where each local member's
// output comes from. Every node derives the same message layouts from the
// response: the message from node a to node b holds, for each rank i of a
// in request order, its blocks for the ranks j of b in request order.
struct AlltoallRoutes {
  // `bytes` of request `request`'s input from `offset` (local inputs), or
  // of the receive buffer at `offset` (`remote`).
  struct Piece {
    size_t request = 0;
    size_t offset = 0;
    size_t bytes = 0;
    bool remote = false;
  };
  std::vector<collective::Range> send_to, recv_from;  // by node, in the send / receive buffers
  size_t send_bytes = 0, recv_bytes = 0;
  std::vector<Piece> pack;                 // local inputs, in send-buffer order
  std::vector<std::vector<Piece>> output;  // parallel to r.requests (local members only), in output order
};
AlltoallRoutes alltoallRoutes(const Response& r, const RankAccess& access);

// REDUCESCATTER: rows of each member (Horovod's rule: the first dim0 % n
// members get one extra); fills output shapes of `result`.
std::vector<int64_t> reducescatterRows(const Response& r);
// The elements of a reducescatter's fused tensor each node's ranks receive
// (`rows` as reducescatterRows), indexed by node: what the ring
// reduce-scatter among the daemons leaves reduced on each.
std::vector<std::vector<collective::ElementRange>> reducescatterOwned(const Response& r,
                                                                      const std::vector<int64_t>& rows,
                                                                      const RankAccess& access);
OutputLayout reducescatterLayout(const Response& r, const std::vector<int64_t>& rows, ResponseResult* result);

}  // namespace gradsync::executor
