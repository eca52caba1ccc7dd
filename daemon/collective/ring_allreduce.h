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

// Which collective among the daemons a transfer belongs to, as every daemon
// taking part knows it on its own from the batch it executes (nothing of
// it counts calls across responses: a daemon with no part in a response
// skips it without shifting anything).
struct TransferId {
  enum class Space : uint8_t {
    kBatch,    // a collective of a negotiated batch
    kControl,  // the daemons' own exchanges (steady-state rounds, the goodbye)
  };
  Space space = Space::kBatch;
  uint64_t epoch = 0;
  uint64_t batch = 0;     // the batch's sequence number (kControl: the exchange's)
  uint32_t response = 0;  // the fused response's index in the batch
  uint32_t call = 0;      // the data-plane call's index in that response
  static TransferId control(uint64_t sequence) {
    TransferId id;
    id.space = Space::kControl;
    id.batch = sequence;
    return id;
  }
};

// A tag's top 24 bits name the batch of a kBatch transfer in plain
// (bit 63 set, then the epoch's low 4 bits, whether the sequence is 2^40 or
// more, its low 18 bits); the low 40 bits are the keyed hash. Every
// transfer of one batch matches batchTagBits() under kBatchTagMask, so a
// finished batch's strays can be found and dropped; kControl tags have bit
// 63 clear and are never taken for a batch's.
constexpr uint64_t kBatchTagMask = ~((uint64_t{1} << 40) - 1);
uint64_t batchTagBits(uint64_t epoch, uint64_t batch);

struct RingContext {
  transport::Transport* transport = nullptr;
  transport::Peer* left = nullptr;   // receives come from here
  transport::Peer* right = nullptr;  // sends go here
  int rank = 0;                      // position in the ring
  int size = 1;
  TransferId id;  // distinguishes collectives: part of every tag
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

// The tag of one chunk: a keyed hash (SipHash-2-4) of (the collective's
// id, phase, step, chunk, the sending node's position), so that only holders
// of the key can produce it and a message from another node, or of another
// collective, step or chunk, matches no receive.
uint64_t ringTag(const SipKey& key, const TransferId& id, int phase, int step, size_t chunk, int sender);

}  // namespace gradsync::collective
