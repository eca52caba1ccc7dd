// SPDX-License-Identifier: Apache-2.0
// Data movement among daemons around the ring: pipelined broadcast from one
// node, and allgather of byte ranges each node owns (any placement of ranks
// on nodes), both chunked so that forwarding overlaps receiving.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/collective/ring_allreduce.h"

namespace gradsync::collective {

// Copies `bytes` at `data` from the node at ring position `root` to every
// node (in place). Errors name the peer.
Status ringBroadcast(const RingContext& ring, void* data, size_t bytes, int root);

// A byte range of the shared result buffer.
struct Range {
  size_t offset = 0;
  size_t bytes = 0;
};

// Every node holds its own `owned[ring.rank]` ranges of `buffer` filled in;
// afterwards every node holds all ranges of every node. `owned` is indexed by
// ring position and must be identical on every node.
Status ringAllgather(const RingContext& ring, uint8_t* buffer, const std::vector<std::vector<Range>>& owned);

}  // namespace gradsync::collective
