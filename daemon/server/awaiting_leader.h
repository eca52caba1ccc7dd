// SPDX-License-Identifier: Apache-2.0
// A multi-node job's local requests that are not in this daemon's
// negotiation: those made before the node's role was known (the peer side
// starts once every local rank registered; they are replayed then), and a
// follower's requests forwarded to the leader and not yet in a batch of its.
// Once a batch of the leader's starts, only its completion answers its
// requests: a membership change or failure meanwhile must not tell a rank
// its operation ended (and its buffer is free) while the executor may still
// write it.
//
// Its own lock: the Job calls in with its lock held (this one is taken
// after it, a leaf).
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/coordinator/request.h"

namespace gradsync::server {

class Session;

class AwaitingLeader {
 public:
  using Early = std::pair<std::shared_ptr<Session>, coordinator::Request>;

  // Holds `request` of `session` (null: another node's rank) while the
  // node's role is not known yet; true when held (moved from `request`).
  bool holdUntilStarted(const std::shared_ptr<Session>& session, coordinator::Request& request) GS_EXCLUDES(mutex_);
  // The role is known: the requests held meanwhile, in arrival order, to
  // submit. Nothing is held from now on.
  std::vector<Early> start() GS_EXCLUDES(mutex_);
  bool started() const GS_EXCLUDES(mutex_);

  // Follower: `request` went to the leader.
  void forwarded(coordinator::Request request) GS_EXCLUDES(mutex_);
  // The request of `rank` with `handle` was answered (done or failed).
  void answered(int rank, uint64_t handle) GS_EXCLUDES(mutex_);
  // A batch of the leader's with `responses` starts here, or `response`
  // completed: their requests are no longer awaited.
  void batchStarts(const std::vector<coordinator::Response>& responses) GS_EXCLUDES(mutex_);
  void completed(const coordinator::Response& response) GS_EXCLUDES(mutex_);
  size_t forwardedCount() const GS_EXCLUDES(mutex_);

  // For a failure: the requests held before the start, and those
  // forwarded (each once).
  std::vector<Early> takeEarly() GS_EXCLUDES(mutex_);
  std::vector<coordinator::Request> takeForwarded() GS_EXCLUDES(mutex_);

 private:
  void forgetLocked(const coordinator::Response& response) GS_REQUIRES(mutex_);

  mutable Mutex mutex_;
  bool started_ GS_GUARDED_BY(mutex_) = false;
  std::vector<Early> early_ GS_GUARDED_BY(mutex_);
  std::map<std::pair<int, uint64_t>, coordinator::Request> forwarded_ GS_GUARDED_BY(mutex_);  // (rank, handle)
};

}  // namespace gradsync::server
