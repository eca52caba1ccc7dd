// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/pairwise_exchange.h"

#include <string>

namespace gradsync::collective {
namespace {
// Tags of the exchange: phase 2 of the ring's tag space (0 and 1 are the
// ring's), keyed by the pair (from, to) so that the receive for one
// sender can match nothing of another.
constexpr int kPairwisePhase = 2;

uint64_t pairTag(const MeshContext& mesh, int from, int to) {
  return ringTag(mesh.tag_key, mesh.id, kPairwisePhase, from * mesh.size() + to, 0, from);
}
}  // namespace

Status pairwiseExchange(const MeshContext& mesh, const uint8_t* send, const std::vector<Range>& send_to, uint8_t* recv,
                        const std::vector<Range>& recv_from) {
  const int n = mesh.size();
  if (static_cast<int>(send_to.size()) != n || static_cast<int>(recv_from.size()) != n || mesh.rank < 0 ||
      mesh.rank >= n) {
    return invalidArgument("pairwise exchange: ranges for " + std::to_string(send_to.size()) + "/" +
                           std::to_string(recv_from.size()) + " nodes, the mesh has " + std::to_string(n));
  }
  std::vector<transport::RequestPtr> requests;
  // Receives first: a message that arrives early finds its buffer.
  for (int step = 1; step < n; ++step) {
    const int from = (mesh.rank - step + n) % n;
    const Range& r = recv_from[from];
    if (r.bytes > 0)
      requests.push_back(mesh.peers[from]->irecv(recv + r.offset, r.bytes, pairTag(mesh, from, mesh.rank)));
  }
  // Staggered: at step s node i sends to i + s, so no node is every
  // sender's first destination.
  for (int step = 1; step < n; ++step) {
    const int to = (mesh.rank + step) % n;
    const Range& r = send_to[to];
    if (r.bytes > 0) requests.push_back(mesh.peers[to]->isend(send + r.offset, r.bytes, pairTag(mesh, mesh.rank, to)));
  }
  if (requests.empty()) return okStatus();
  std::vector<transport::Request*> raw;
  for (auto& r : requests) raw.push_back(r.get());
  return mesh.transport->waitAll(
      raw.data(), raw.size(), mesh.deadline,
      "pairwise exchange of node " + std::to_string(mesh.rank) + " with " + std::to_string(n - 1) + " other nodes");
}

}  // namespace gradsync::collective
