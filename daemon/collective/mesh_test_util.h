// SPDX-License-Identifier: Apache-2.0
// n "daemons" in one process for the data-plane tests: real UCX workers,
// each with endpoints to all the others (a pairwise exchange's mesh).
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "daemon/collective/pairwise_exchange.h"
#include "daemon/transport/ucx/ucx_transport.h"

namespace gradsync::collective {

struct MeshNode {
  std::unique_ptr<transport::UcxTransport> transport;
  std::vector<transport::PeerPtr> peers;  // by position; null at its own
};

inline std::vector<MeshNode> makeMesh(int n) {
  std::vector<MeshNode> nodes(n);
  for (auto& node : nodes) node.transport = std::move(transport::UcxTransport::create().value());
  for (int a = 0; a < n; ++a) {
    nodes[a].peers.resize(n);
    for (int b = 0; b < n; ++b) {
      if (a != b)
        nodes[a].peers[b] =
            std::move(nodes[a].transport->connect(nodes[b].transport->address(), "rank " + std::to_string(b)).value());
    }
  }
  return nodes;
}

// Node `rank`'s view of the mesh, with a 30 s deadline.
inline MeshContext contextFor(int rank, MeshNode& node, uint64_t sequence) {
  MeshContext mesh;
  mesh.transport = node.transport.get();
  for (auto& p : node.peers) mesh.peers.push_back(p.get());
  mesh.rank = rank;
  mesh.id.batch = sequence;
  mesh.deadline = transport::Clock::now() + std::chrono::seconds(30);
  return mesh;
}

// `count` floats per node whose sum depends on the order of the additions
// (large and small values alternate by node): a test of bitwise agreement.
inline std::vector<std::vector<float>> orderSensitiveFloats(int n, size_t count) {
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) data[r][i] = (r % 2 ? 1e8f : 1.0f) * static_cast<float>(i % 7 + r) + 0.1f * r;
  }
  return data;
}

// Runs fn(rank) on one thread per node; returns their statuses.
template <typename Fn>
std::vector<Status> onEveryNode(int n, Fn fn) {
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { statuses[r] = fn(r); });
  for (auto& t : threads) t.join();
  return statuses;
}

}  // namespace gradsync::collective
