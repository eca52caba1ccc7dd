// SPDX-License-Identifier: Apache-2.0
// Which allreduce among daemons, by buffer size and node count, from a cost
// model of one message: alpha (latency on the wire), per-message work at
// each end, and per-byte time. The direct exchange takes one latency but
// n-1 messages at every node; recursive doubling log2 n latencies of one
// message each; the ring 2(n-1) latencies but moves each byte twice only;
// Rabenseifner's halving and doubling 2 log2 n latencies with the ring's
// bytes (two latencies and twice the buffer more where n is not a power of
// two).
// Every daemon of a job computes the same choice from the same inputs.
#pragma once

#include <cstddef>

namespace gradsync::collective {

enum class AllreduceAlgorithm { kDirect, kRecursiveDoubling, kRing, kHalvingDoubling };
constexpr int kAllreduceAlgorithms = 4;
const char* algorithmName(AllreduceAlgorithm algorithm);

struct LinkCost {
  // Defaults: UCX over TCP between daemons on this project's test machines
  // (docs/performance.md, "Algorithms by size").
  double latency_us = 20;       // alpha
  double message_us = 5;        // work per message sent or received, at each end
  double byte_us = 1.0 / 1000;  // beta: 1 GB/s
  // Reducing one byte of a received buffer into the own (gamma: 5 GB/s).
  // The ring's chunks reduce while the next ones travel: it pays none.
  double reduce_byte_us = 1.0 / 5000;
};

// Recursive doubling holds a buffer per step: it is chosen up to this size.
constexpr size_t kDoublingMaxBytes = 1 << 20;
// Halving and doubling holds up to twice the buffer in scratch: it is
// chosen up to this size.
constexpr size_t kHalvingMaxBytes = 16 << 20;

// Modelled time of each algorithm, in microseconds.
double modelledUs(AllreduceAlgorithm algorithm, size_t bytes, int nodes, const LinkCost& cost);
// The cheapest (the direct exchange only where its scratch, n times the
// buffer, stays small: kDirectAllreduceMaxBytes; recursive doubling up to
// kDoublingMaxBytes; halving and doubling up to kHalvingMaxBytes, and only
// where it is strictly cheaper than the ring, as it is from 4 nodes).
AllreduceAlgorithm chooseAllreduce(size_t bytes, int nodes, const LinkCost& cost = {});

}  // namespace gradsync::collective
