// SPDX-License-Identifier: Apache-2.0
// A request's way into a job, for Job's files only: an Enqueue checked
// (validateEnqueue, the rank's operations in flight, its handle, the
// job's failure and epoch), then held until this node's role is known,
// held for the steady-state rounds, or submitted where the node's place
// says (negotiated here, or forwarded to the leader); what the negotiation
// makes ready is queued, and runs inline (small, on one daemon, nothing
// executing) or wakes the executor thread.
//
// The state it changes (the negotiation, the queue of batches) is the
// job's, under the job's lock, as the job's other parts do. Its Locked
// steps name the job whose lock they need.
#pragma once

#include <memory>
#include <vector>

#include "base/thread_annotations.h"
#include "daemon/server/job.h"

namespace gradsync::server {

class Job::Submission {
 public:
  explicit Submission(Job& job) : job_(job) {}
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;

  // One Enqueue of `session`; errors are answered with a Done at once.
  void submit(const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue) GS_EXCLUDES(job_.mutex_);
  // What validateEnqueue needs to check a request of `rank` (`remote`: a
  // rank on another node, whose range that node checked). No lock: the
  // size and process sets are read without one.
  EnqueueContext enqueueContext(int rank, const handoff::ShmArena* arena, bool remote = false) const;

  // --- Steps of a job's, its lock held.
  // A request into the negotiation: held until the node's role is known,
  // held for the steady-state rounds, or submitted where the node's place
  // says. `steady` false: not held for the rounds (it was, too long).
  void submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                    RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch, bool steady = true)
      GS_REQUIRES(job.mutex_);
  // The leader's (or one daemon's) negotiation of `request`.
  void negotiateLocked(Job& job, coordinator::Request request, RankMessages* to_ranks,
                       std::vector<coordinator::Response>* inline_batch) GS_REQUIRES(job.mutex_);
  // Responses the negotiation made ready: queued, and run inline (into
  // `inline_batch`, begun) or handed to the executor thread.
  void readyLocked(Job& job, std::vector<coordinator::Response> ready, std::vector<coordinator::Response>* inline_batch)
      GS_REQUIRES(job.mutex_);

 private:
  // A local request repeating a cached collective is held for the rounds
  // (true: taken).
  bool holdForRoundsLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request& request)
      GS_REQUIRES(job.mutex_);

  Job& job_;
};

}  // namespace gradsync::server
