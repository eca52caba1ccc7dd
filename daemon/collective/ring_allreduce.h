// SPDX-License-Identifier: Apache-2.0
// Ring allreduce and reduce-scatter among daemons (one participant per node,
// after the local reduction): reduce-scatter then allgather around the ring, each segment
// moved in chunks with the next receive posted while the current chunk is
// reduced, so transfer and reduction overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "daemon/common/siphash.h"
#include "daemon/transport/transport.h"

namespace gradsync::collective {

struct RingContext {
  transport::Transport* transport = nullptr;
  transport::Peer* left = nullptr;   // receives come from here
  transport::Peer* right = nullptr;  // sends go here
  int rank = 0;                      // position in the ring
  int size = 1;
  uint64_t sequence = 0;  // distinguishes collectives: part of every tag
  // Keys the tags (derived from the job's secret): a transfer from outside
  // the job cannot match a receive, so it is never reduced.
  SipKey tag_key;
  transport::Clock::time_point deadline;
  size_t chunk_bytes = 1 << 20;
};

// Combines `count` elements of `dtype` at `data` (in place) across the ring
// with `op` (SUM, MIN, MAX or PRODUCT; AVERAGE and scale factors are the
// caller's: it applies them once, after). `scratch` is resized as needed and
// may be reused across calls. Errors name the peer and the step.
Status ringAllreduce(const RingContext& ring, void* data, size_t count, DataType dtype, ReduceOp op,
                     std::vector<uint8_t>* scratch);

// A range of a buffer's elements.
struct ElementRange {
  size_t begin = 0;
  size_t count = 0;
};

// Reduce-scatter around the ring: every node's `input` is combined with
// `op` (as for ringAllreduce); afterwards node i's `data` holds the fully
// reduced elements of `owned[i]` (identical on every node, disjoint), the
// rest of it partial sums or nothing. `input` is only read (it may be
// `data`). Each node sends (n-1)/n of the data, half of an allreduce.
Status ringReduceScatter(const RingContext& ring, const void* input, void* data, DataType dtype, ReduceOp op,
                         const std::vector<std::vector<ElementRange>>& owned, std::vector<uint8_t>* scratch);

// The tag of one chunk: a keyed hash (SipHash-2-4) of (sequence, phase,
// step, chunk), so that only holders of the key can produce it.
uint64_t ringTag(const SipKey& key, uint64_t sequence, int phase, int step, size_t chunk);

}  // namespace gradsync::collective
