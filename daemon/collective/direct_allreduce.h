// SPDX-License-Identifier: Apache-2.0
// Allreduce of a small buffer among daemons in one step: every node sends
// its whole contribution to every other node at once, then combines all of
// them in node order, so every node computes bitwise the same result. One
// message latency where the ring takes 2(n-1) in a row; each node sends
// n-1 times the buffer, so it pays for small buffers only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/collective/pairwise_exchange.h"

namespace gradsync::collective {

// The direct allreduce among n daemons is chosen where the buffer times
// n-1 (what each node sends) is at most this.
constexpr size_t kDirectAllreduceMaxBytes = 64 << 10;

// Combines `count` elements of `dtype` at `data` (in place) across the
// mesh with `op` (SUM, MIN, MAX or PRODUCT; AVERAGE and scale factors are
// the caller's, as for ringAllreduce). `scratch` is resized to n times the
// buffer and may be reused across calls. Errors name the nodes.
Status directAllreduce(const MeshContext& mesh, void* data, size_t count, DataType dtype, ReduceOp op,
                       std::vector<uint8_t>* scratch);

}  // namespace gradsync::collective
