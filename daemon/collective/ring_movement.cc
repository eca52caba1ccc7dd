// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/ring_movement.h"

#include <algorithm>

namespace gradsync::collective {
namespace {

using transport::Request;
using transport::RequestPtr;

int mod(int a, int n) { return ((a % n) + n) % n; }

// Phases of their own in the data plane's tag space (the ring allreduce
// uses 0 and 1, the pairwise exchange 2, the rounds 3, the goodbye 4).
constexpr int kBroadcastPhase = 8;
constexpr int kAllgatherPhase = 9;

Status waitAll(const RingContext& ring, std::vector<RequestPtr>& requests, const std::string& what) {
  std::vector<Request*> raw;
  for (auto& r : requests) raw.push_back(r.get());
  return ring.transport->waitAll(raw.data(), raw.size(), ring.deadline, what);
}

std::string describe(const RingContext& ring, const char* what) {
  return std::string(what) + " with " + ring.left->name() + " (left) and " + ring.right->name() + " (right)";
}

}  // namespace

Status ringBroadcast(const RingContext& ring, void* data, size_t bytes, int root) {
  if (ring.size <= 1 || bytes == 0) return okStatus();
  auto* base = static_cast<uint8_t*>(data);
  const size_t chunk = std::max<size_t>(ring.chunk_bytes, bytes / 0xffff + 1);
  const bool is_root = ring.rank == root;
  const bool forwards = mod(ring.rank + 1, ring.size) != root;  // the last node before the root only receives
  const std::string what = describe(ring, "ring broadcast");
  std::vector<RequestPtr> sends;
  for (size_t c = 0, off = 0; off < bytes; ++c, off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    if (!is_root) {
      RequestPtr recv = ring.left->irecv(
          base + off, n, ringTag(ring.tag_key, ring.id, kBroadcastPhase, 0, c, mod(ring.rank - 1, ring.size)));
      transport::Request* one[] = {recv.get()};
      RETURN_IF_ERROR(ring.transport->waitAll(one, 1, ring.deadline, what));
    }
    if (forwards) {
      sends.push_back(
          ring.right->isend(base + off, n, ringTag(ring.tag_key, ring.id, kBroadcastPhase, 0, c, ring.rank)));
    }
  }
  return waitAll(ring, sends, what);
}

Status ringAllgather(const RingContext& ring, uint8_t* buffer, const std::vector<std::vector<Range>>& owned) {
  const int n = ring.size;
  if (n <= 1) return okStatus();
  const std::string what = describe(ring, "ring allgather");
  for (int step = 0; step < n - 1; ++step) {
    const int send_node = mod(ring.rank - step, n);
    const int recv_node = mod(ring.rank - step - 1, n);
    std::vector<RequestPtr> requests;
    size_t index = 0;
    for (const Range& r : owned[recv_node]) {
      if (r.bytes > 0)
        requests.push_back(
            ring.left->irecv(buffer + r.offset, r.bytes,
                             ringTag(ring.tag_key, ring.id, kAllgatherPhase, step, index, mod(ring.rank - 1, n))));
      ++index;
    }
    index = 0;
    for (const Range& r : owned[send_node]) {
      if (r.bytes > 0)
        requests.push_back(ring.right->isend(buffer + r.offset, r.bytes,
                                             ringTag(ring.tag_key, ring.id, kAllgatherPhase, step, index, ring.rank)));
      ++index;
    }
    RETURN_IF_ERROR(waitAll(ring, requests, what));
  }
  return okStatus();
}

}  // namespace gradsync::collective
