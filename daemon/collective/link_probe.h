// SPDX-License-Identifier: Apache-2.0
// The cost of one message among a mesh's nodes, measured and agreed on, for
// the allreduce choice (allreduce_choice.h) in place of the defaults.
//
// Every node of the mesh runs it at the same point (the data plane: the
// first allreduce among those nodes in an epoch), on the mesh of that
// collective, with tags of its own (phases 16 to 43 of the data plane's
// tag space):
//  1. recursive doubling runs of 8 bytes: one exchange step (latency and
//     the work of two messages);
//  2. among 3 to kDirectProbeMaxNodes nodes, runs of the direct exchange of
//     8 bytes (one latency, 2(n-1) messages at each node): the work of one
//     message, the rest of the step being latency;
//  3. recursive doubling runs of kProbeBytes: the time per byte;
//  4. one more recursive doubling run takes each figure's mean over the
//     nodes (summed in the same order everywhere): every node ends with
//     bitwise the same cost, so all of them make the same choices.
// Each figure is the fastest of its runs (the first run of each kind is not
// timed: it connects the endpoints). Bounded by the mesh's deadline; an
// error names the node and the run.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "daemon/collective/allreduce_choice.h"
#include "daemon/collective/pairwise_exchange.h"

namespace gradsync::collective {

// Above this many nodes the direct exchange is not timed (it would touch
// every other node); the work per message stays the default's.
constexpr int kDirectProbeMaxNodes = 16;
// The buffer of the runs that time the bytes.
constexpr size_t kProbeBytes = 256 << 10;

// The measured cost; `defaults` gives what is not measured (the reduction's
// time per byte, and the work per message where step 2 does not run).
StatusOr<LinkCost> probeLinkCost(const MeshContext& mesh, const LinkCost& defaults = {});

}  // namespace gradsync::collective
