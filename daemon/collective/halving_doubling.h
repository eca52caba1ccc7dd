// SPDX-License-Identifier: Apache-2.0
// Rabenseifner's allreduce among n daemons: a reduce-scatter by recursive
// halving (each of log2 p steps sends half of what is left to one partner
// and reduces the other half), then an allgather by recursive doubling
// (the same partners in reverse, each step doubling what a node holds).
// 2 log2 p latencies, like recursive doubling, but each node sends about
// 2(p-1)/p of the buffer in all, like the ring, whose 2(n-1) latencies it
// avoids. With p the largest power of two up to n, node p+j first sends its
// whole buffer to node j (which reduces it) and at the end receives the
// result from it (two latencies and twice the buffer more).
//
// Every part of the buffer is reduced on exactly one node and then copied,
// so every node ends with bitwise the same result. Receives are all posted
// when the run starts (into the buffer itself or into `scratch`, under
// twice the buffer).
#pragma once

#include <cstddef>
#include <vector>

#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/ring_allreduce.h"

namespace gradsync::collective {

// One step of a node's run: send `send` (elements of the buffer) to
// `peer`, receive `receive` from it; `reduce`: what arrives is combined
// into the buffer's range, otherwise it replaces it. Empty ranges move
// nothing (both ends compute the same ranges).
struct HalvingStep {
  int peer = 0;
  int stage = 0;  // part of the tag: one message per (sender, stage) in a run
  ElementRange send;
  ElementRange receive;
  bool reduce = false;
};
// Node `rank`'s steps among `n` for a buffer of `count` elements.
std::vector<HalvingStep> halvingSteps(int rank, int n, size_t count);

// Allreduce of `count` elements of `dtype` at `data` (in place) with `op`
// (SUM, MIN, MAX or PRODUCT; AVERAGE and scale factors are the caller's).
// `scratch` is resized as needed and may be reused. Errors name the nodes.
Status halvingDoublingAllreduce(const MeshContext& mesh, void* data, size_t count, DataType dtype, ReduceOp op,
                                std::vector<uint8_t>* scratch);

}  // namespace gradsync::collective
