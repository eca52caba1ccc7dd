// SPDX-License-Identifier: Apache-2.0
// The requests a follower writes to its leader in one message
// (FollowerMessage.requests), built in the order its ranks submitted them.
// A request by cache id joins an earlier entry of the same cached response,
// epoch and call as one of its `same_ranks` (a node's ranks repeating a
// tensor travel as one entry, and the leader takes them as one), but only
// where its rank has nothing after that entry: each rank's requests keep
// their order. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <unordered_map>

#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class RequestBatch {
 public:
  void add(v1::FollowerMessage::Request request);
  bool empty() const { return message_.requests().requests().empty(); }
  // About the bytes of the message so far (a joined rank counts 5).
  size_t bytes() const { return bytes_; }
  // The message, and the batch emptied.
  v1::FollowerMessage take();

 private:
  struct Key {
    uint64_t cache_id;
    uint64_t epoch;
    uint64_t call;
    bool operator==(const Key& other) const {
      return std::tie(cache_id, epoch, call) == std::tie(other.cache_id, other.epoch, other.call);
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      return std::hash<uint64_t>()(key.cache_id * 0x9e3779b97f4a7c15ULL ^ key.epoch * 31 ^ key.call);
    }
  };

  v1::FollowerMessage message_;
  size_t bytes_ = 0;
  std::unordered_map<Key, int, KeyHash> latest_;  // the newest entry of each key
  std::unordered_map<int, int> last_of_rank_;     // rank -> its last entry
};

}  // namespace gradsync::peer
