// SPDX-License-Identifier: Apache-2.0
// Which allreduce among daemons, by buffer size and node count, from a cost
// model of one message: alpha (latency on the wire), per-message work at
// each end, and per-byte time. The direct exchange takes one latency but
// n-1 messages at every node; recursive doubling log2 n latencies of one
// message each; the ring 2(n-1) latencies but moves each byte twice only.
// Every daemon of a job computes the same choice from the same inputs.
#pragma once

#include <cstddef>

namespace gradsync::collective {

enum class AllreduceAlgorithm { kDirect, kRecursiveDoubling, kRing };
const char* algorithmName(AllreduceAlgorithm algorithm);

struct LinkCost {
  // Defaults: UCX over TCP between daemons on this project's test machines
  // (docs/performance.md, "Algorithms by size").
  double latency_us = 20;       // alpha
  double message_us = 5;        // work per message sent or received, at each end
  double byte_us = 1.0 / 1000;  // beta: 1 GB/s
};

// Recursive doubling holds a buffer per step: it is chosen up to this size.
constexpr size_t kDoublingMaxBytes = 1 << 20;

// Modelled time of each algorithm, in microseconds.
double modelledUs(AllreduceAlgorithm algorithm, size_t bytes, int nodes, const LinkCost& cost);
// The cheapest (the direct exchange only where its scratch, n times the
// buffer, stays small: kDirectAllreduceMaxBytes; recursive doubling up to
// kDoublingMaxBytes).
AllreduceAlgorithm chooseAllreduce(size_t bytes, int nodes, const LinkCost& cost = {});

}  // namespace gradsync::collective
