// SPDX-License-Identifier: Apache-2.0
// Pairwise exchange among daemons (alltoall across nodes): every node sends
// each other node the bytes meant for it, directly, so each byte crosses the
// network once (a ring allgather would carry every byte to every node).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/collective/ring_allreduce.h"
#include "daemon/collective/ring_movement.h"

namespace gradsync::collective {

// Endpoints to every node of the job (the ring's order).
struct MeshContext {
  transport::Transport* transport = nullptr;
  std::vector<transport::Peer*> peers;  // by node position; null at `rank`
  int rank = 0;                         // this node's position
  TransferId id;                        // distinguishes collectives: part of every tag
  SipKey tag_key;
  transport::Clock::time_point deadline;
  int size() const { return static_cast<int>(peers.size()); }
};

// Sends `send[send_to[m]]` to node m and receives node m's bytes for this
// node into `recv[recv_from[m]]`, for every other node m at once (all
// receives posted first, then the sends, in an order staggered by
// position). `send_to` and `recv_from` are indexed by node position;
// entries for this node are ignored, empty ranges move nothing. What node a
// sends to b must be exactly what b expects from a (both sides compute it
// from the same negotiated response). Errors name the peer.
Status pairwiseExchange(const MeshContext& mesh, const uint8_t* send, const std::vector<Range>& send_to, uint8_t* recv,
                        const std::vector<Range>& recv_from);

}  // namespace gradsync::collective
