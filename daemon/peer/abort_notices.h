// SPDX-License-Identifier: Apache-2.0
// AbortJob calls to other daemons, made at once and in parallel (a follower
// that lost a node tells other followers itself, in case the leader is what
// it lost), each bounded by a short deadline; wait() returns once every call
// has answered or timed out. Whoever holds it last waits for the calls
// (the destructor does): never a call's own callback.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

class AbortNotices {
 public:
  // Sends `request` to the peer service at each of `addresses` (null
  // `credentials`: plaintext).
  static std::shared_ptr<AbortNotices> send(v1::AbortJobRequest request, const std::vector<std::string>& addresses,
                                            const std::shared_ptr<grpc::ChannelCredentials>& credentials);
  // Returns once every call has answered or timed out (each has a
  // deadline).
  void wait() GS_EXCLUDES(mutex_);
  // Waits as wait() does: the calls' callbacks hold no reference to this.
  ~AbortNotices();

  // The followers that follower `self` (of `followers`, in ring order)
  // tells: those 1, 2, 4, ... places after it. Each follower that hears
  // passes it on once the same way, so a notice reaches every follower
  // within ceil(log2 F) hops, with at most ceil(log2 F) calls made by each
  // (F x log2 F in all when every follower detects the loss itself, not
  // F x (F - 1)).
  static std::vector<size_t> relaysOf(size_t self, size_t followers);

  static constexpr auto kDeadline = std::chrono::seconds(2);

 private:
  struct Call {
    std::unique_ptr<v1::Peer::Stub> stub;
    grpc::ClientContext context;
    v1::AbortJobResponse response;
  };
  v1::AbortJobRequest request_;
  std::vector<std::unique_ptr<Call>> calls_;  // set before the first call starts
  Mutex mutex_;
  CondVar done_cv_;
  size_t done_ GS_GUARDED_BY(mutex_) = 0;
};

}  // namespace gradsync::peer
