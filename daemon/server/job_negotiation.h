// SPDX-License-Identifier: Apache-2.0
// A job's negotiation on this daemon (one daemon, or the leader across
// daemons; a follower keeps its process sets here too): the negotiator, the
// job's size and process sets as enqueue checks read them without a lock,
// and the stall warnings and deadlines of what waits for ranks.
//
// Its own lock, a leaf: the Job calls it under Job's lock, which keeps the
// negotiation in step with the batch queue and the epochs; size() and
// processSets() take no lock at all.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/coordinator/negotiator.h"
#include "daemon/server/stall_watch.h"
#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::server {

class JobNegotiation {
 public:
  // `process_sets[i]`: the ranks of process set i + 1 (checked already).
  // `stall_deadline` zero: a stall never fails.
  JobNegotiation(std::string job_id, int size, std::vector<std::vector<int>> process_sets,
                 coordinator::Clock::duration stall_deadline);

  // The job's size (smaller after an elastic epoch change) and its process
  // sets, published for the enqueue checks: no lock.
  int size() const { return size_.load(); }
  std::shared_ptr<const coordinator::ProcessSetTable> processSets() const { return std::atomic_load(&sets_); }

  // Negotiator::submit; what becomes ready changes no process set until
  // publish().
  StatusOr<std::vector<coordinator::Response>> submit(coordinator::Request request, coordinator::Clock::time_point now)
      GS_EXCLUDES(mutex_);
  coordinator::Negotiator::Repeated submit(const coordinator::Repeat& repeat, coordinator::Clock::time_point now)
      GS_EXCLUDES(mutex_);
  // The process set changes among `responses` (negotiated here, or
  // `from_leader`: negotiated by the leader, applied here first), published
  // for the enqueue checks. A leader's change that does not apply here is
  // logged and skipped.
  void publish(const std::vector<coordinator::Response>& responses, bool from_leader) GS_EXCLUDES(mutex_);
  // A new epoch of `size` ranks: nothing pending, only the global process
  // set (the others named ranks of the old numbering), no stall warned of.
  void resize(int size) GS_EXCLUDES(mutex_);

  size_t pendingCount() const GS_EXCLUDES(mutex_);
  bool joined(int rank) const GS_EXCLUDES(mutex_);
  // Every pending request, taken out (the job fails them).
  std::vector<coordinator::Request> takeAll() GS_EXCLUDES(mutex_);

  // A stall past its deadline: what to say, and its requests, taken out.
  struct Expired {
    std::string what;
    std::vector<coordinator::Request> requests;
  };
  // Logs a warning for each collective waiting past `warning` for the first
  // time (naming the missing ranks: `local` describes one registered here,
  // empty when not here; `nodes`, when given, who holds the others) and
  // returns those past the deadline.
  std::vector<Expired> checkStalls(coordinator::Clock::time_point now, coordinator::Clock::duration warning,
                                   const std::function<std::string(int rank)>& local,
                                   std::optional<std::vector<v1::NodeInfo>> nodes) GS_EXCLUDES(mutex_);
  uint64_t stallWarnings() const GS_EXCLUDES(mutex_);

  // For gradsyncctl: the collectives being negotiated, oldest first; the
  // process sets other than the global one.
  void describe(coordinator::Clock::time_point now, v1::JobTensors* out) const GS_EXCLUDES(mutex_);
  void describeProcessSets(v1::JobInfo* info) const;

 private:
  void publishLocked() GS_REQUIRES(mutex_);

  const std::string job_id_;
  mutable Mutex mutex_;
  coordinator::Negotiator negotiator_ GS_GUARDED_BY(mutex_);
  StallWatch stalls_ GS_GUARDED_BY(mutex_);
  // Written under mutex_, read without (std::atomic_load).
  std::atomic<int> size_;
  std::shared_ptr<const coordinator::ProcessSetTable> sets_;
};

}  // namespace gradsync::server
