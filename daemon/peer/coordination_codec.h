// SPDX-License-Identifier: Apache-2.0
// The coordination streams' messages in their compact form, and their
// traffic: the leader encodes each negotiated response, in full the first
// time and as a response-cache id alone once it repeats (its size does not
// grow with the job); a follower decodes them, taking its own ranks'
// handles and offsets from the requests it forwarded, and sends its ranks'
// repeated requests by id, which the leader expands. Both sides keep one
// ResponseCache, emptied at each epoch. Thread-safe.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/coordinator/request.h"
#include "daemon/peer/response_cache.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class CoordinationCodec {
 public:
  CoordinationCodec(std::string job_id, size_t cache_capacity);

  // Leader: `response` for the followers.
  v1::NegotiatedResponse encode(const coordinator::Response& response) GS_EXCLUDES(mutex_);
  // Follower: the leader's response (DATA_LOSS naming the id when it refers
  // to a response this node never received in full).
  StatusOr<coordinator::Response> decode(const v1::NegotiatedResponse& response) GS_EXCLUDES(mutex_);
  // Follower: a local rank's request of `epoch`, by id when it repeats a
  // cached one.
  v1::FollowerMessage::Request compact(int rank, const v1::Enqueue& enqueue, uint64_t epoch) GS_EXCLUDES(mutex_);
  // Leader: a follower's request in full (DATA_LOSS for an unknown id).
  StatusOr<v1::Enqueue> expand(const v1::FollowerMessage::Request& request) GS_EXCLUDES(mutex_);
  // Leader: a follower's request by cache id (cache_id != 0) and its
  // same_ranks as ranks repeating the cached response, without a copy of a
  // request (DATA_LOSS for an unknown id, or a rank it does not hold).
  StatusOr<coordinator::Repeat> expandRepeat(const v1::FollowerMessage::Request& request) GS_EXCLUDES(mutex_);
  // The cached response a local request repeats (0: none), and a copy of
  // a cached response.
  uint64_t cachedId(const coordinator::Request& request) const GS_EXCLUDES(mutex_);
  std::optional<coordinator::Response> cachedResponse(uint64_t id) const GS_EXCLUDES(mutex_);
  // A new epoch: ranks were renumbered, and a node that joins knows no id.
  void clear() GS_EXCLUDES(mutex_);

  // Messages written and read on the coordination streams.
  void countSent(size_t bytes);
  void countReceived(size_t bytes);
  struct Traffic {
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    uint64_t messages = 0;
    uint64_t cache_hits = 0;
    uint64_t largest_message = 0;  // bytes
  };
  Traffic traffic() const;

 private:
  const std::string job_id_;
  mutable Mutex mutex_;
  ResponseCache cache_ GS_GUARDED_BY(mutex_);
  // Follower: the local requests forwarded and not yet answered, by name
  // (a rank has one request of a name in flight).
  // What is the rank's own in each step: where its data lies (arena
  // handle and offset, or its CUDA references and output size).
  struct Forwarded {
    int rank;
    uint64_t handle;
    uint64_t offset;
    std::optional<coordinator::CudaRef> cuda;
    std::optional<coordinator::CudaRef> cuda_output;
    uint64_t output_length;

    static Forwarded of(const coordinator::Request& request);
    void applyTo(coordinator::Request* request) const;
  };
  std::unordered_map<std::string, std::vector<Forwarded>> forwarded_ GS_GUARDED_BY(mutex_);
  void noteSize(size_t bytes);  // the largest message so far
  // A BARRIER that succeeded and is no commit: it travels without its
  // requests (NegotiatedResponse.own_ranks), and a follower rebuilds it
  // from the requests of that name it forwarded.
  static bool isPlainBarrier(const coordinator::Response& response);
  // A response whose requests all match the first but for rank, handle,
  // offset and call, in its uniform form (NegotiatedResponse.uniform);
  // nullopt for any other. The follower rebuilds it, its own ranks' handles
  // and offsets from the requests it forwarded.
  static std::optional<v1::NegotiatedResponse> uniformForm(const coordinator::Response& response);
  // DATA_LOSS when its ranks are not a sane list.
  StatusOr<coordinator::Response> fromUniformLocked(const v1::NegotiatedResponse& in) GS_REQUIRES(mutex_);
  // This node's ranks in `response` get the handles and offsets of the
  // requests it forwarded of that name (forgotten then).
  void applyForwardedLocked(coordinator::Response* response) GS_REQUIRES(mutex_);
  coordinator::Response ownBarrierLocked(const v1::NegotiatedResponse& in) GS_REQUIRES(mutex_);
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, messages_{0}, cache_hits_{0}, largest_message_{0};
};

// Conversions between negotiated responses and their wire form.
v1::NegotiatedResponse toProto(const coordinator::Response& response);
coordinator::Response fromProto(const v1::NegotiatedResponse& response);

}  // namespace gradsync::peer
