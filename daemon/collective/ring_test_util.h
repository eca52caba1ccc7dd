// SPDX-License-Identifier: Apache-2.0
// Rings of real UCX workers in one process, one thread per "daemon", for
// the ring algorithm tests.
#pragma once

#include <thread>
#include <vector>

#include "daemon/collective/ring_allreduce.h"
#include "daemon/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"

namespace gradsync::collective {

using transport::UcxTransport;

struct Node {
  std::unique_ptr<UcxTransport> transport;
  transport::PeerPtr left, right;  // right is null when it is the same peer as left (2 nodes)
  transport::Peer* rightPeer() const { return right ? right.get() : left.get(); }
};

inline std::vector<Node> makeRing(int n, const transport::UcxOptions& options = {}) {
  std::vector<Node> nodes(n);
  for (auto& node : nodes) {
    auto t = UcxTransport::create(options);
    EXPECT_TRUE(t.isOk()) << t.status().toString();
    node.transport = std::move(t).value();
  }
  for (int r = 0; r < n; ++r) {
    const int left = (r - 1 + n) % n, right = (r + 1) % n;
    nodes[r].left = std::move(
        nodes[r].transport->connect(nodes[left].transport->address(), "rank " + std::to_string(left)).value());
    if (right != left)
      nodes[r].right = std::move(
          nodes[r].transport->connect(nodes[right].transport->address(), "rank " + std::to_string(right)).value());
  }
  return nodes;
}

// Runs fn(rank, node) on one thread per node and returns their statuses.
template <typename Fn>
std::vector<Status> onEveryNode(std::vector<Node>& nodes, Fn fn) {
  std::vector<Status> statuses(nodes.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < nodes.size(); ++r)
    threads.emplace_back([&, r] { statuses[r] = fn(static_cast<int>(r), nodes[r]); });
  for (auto& t : threads) t.join();
  return statuses;
}

inline RingContext contextFor(int rank, int n, Node& node, uint64_t sequence, size_t chunk) {
  RingContext ring;
  ring.transport = node.transport.get();
  ring.left = node.left.get();
  ring.right = node.rightPeer();
  ring.rank = rank;
  ring.size = n;
  ring.id.batch = sequence;
  ring.deadline = transport::Clock::now() + std::chrono::seconds(30);
  ring.chunk_bytes = chunk;
  return ring;
}

}  // namespace gradsync::collective
