// SPDX-License-Identifier: Apache-2.0
// The response cache of multi-node jobs (Horovod's idea, adapted to the
// forwarding protocol): the leader gives every successful negotiated
// response an id; both sides keep the response's metadata under it. Later
// requests and responses with the same metadata travel as the id plus the
// per-step handle and offset. Bounded: past `capacity` entries nothing new
// is cached (steady-state training repeats the same tensors). Where a
// request's data lies (arena handle and offset; a CUDA tensor's allocation,
// offset, event slot and output) is no part of its metadata: each node
// keeps its own ranks' for the step (CoordinationCodec).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/coordinator/request.h"

namespace gradsync::peer {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  // Leader: the id of `response`'s metadata, and whether it was new (then
  // followers learn it from the full response). 0 when not cacheable.
  std::pair<uint64_t, bool> assign(const coordinator::Response& response);
  // Follower: remembers a response the leader sent in full with `id`.
  void remember(uint64_t id, const coordinator::Response& response);
  // The response stored under `id`, or null; shared, it outlives a clear().
  const coordinator::Response* find(uint64_t id) const;
  std::shared_ptr<const coordinator::Response> shared(uint64_t id) const;
  // Follower: the id under which the leader holds a response containing a
  // request of `request.rank` with `request`'s metadata, or 0.
  uint64_t idFor(const coordinator::Request& request) const;
  // Forgets every entry (a new epoch of an elastic job: ranks were
  // renumbered, and a node that joins knows none). Ids are not reused.
  void clear();

  // Metadata of one request, without its per-step handle and offset.
  static std::string signature(const coordinator::Request& request);
  // The same without the rank: what every rank of a uniform response shares.
  static std::string metadataSignature(const coordinator::Request& request);
  // Whether two requests have the same metadata apart from their ranks (the
  // fields metadataSignature writes, compared exactly).
  static bool sameMetadata(const coordinator::Request& a, const coordinator::Request& b);
  // The key of a response's metadata. Where every rank asked alike (the
  // usual case) it holds one request's metadata and the ranks as numbers,
  // not every rank's request: building it costs a comparison per rank.
  static std::string signature(const coordinator::Response& response);

 private:
  // The ranks of a uniform response (sorted) and its id.
  struct RankedId {
    std::vector<int> ranks;
    uint64_t id;
  };
  static bool uniform(const coordinator::Response& response);
  // The id of the cached response every request of `response` repeats
  // (Request::repeats, every rank present), or 0: no key to build.
  uint64_t repeated(const coordinator::Response& response) const;

  const size_t capacity_;
  uint64_t next_id_ = 1;
  std::unordered_map<std::string, uint64_t> by_signature_;  // leader
  std::map<uint64_t, std::shared_ptr<const coordinator::Response>> responses_;
  // Requests of uniform responses: one entry per response, by metadata.
  std::unordered_map<std::string, std::vector<RankedId>> by_metadata_;
  // Requests of the others: rank + request signature -> id.
  std::unordered_map<std::string, uint64_t> by_request_;
};

}  // namespace gradsync::peer
