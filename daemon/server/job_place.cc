// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_place.h"
#include "daemon/server/job_elastic.h"
#include "daemon/server/job_submission.h"

#include "daemon/common/logging.h"
#include "daemon/coordinator/request_wire.h"

namespace gradsync::server {

// --- One node: everything is decided here.

void Job::OneNode::submitLocked(Job& job, const std::shared_ptr<Session>&, coordinator::Request request,
                                RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch) const {
  job.submission_->negotiateLocked(job, std::move(request), to_ranks, inline_batch);
}

bool Job::OneNode::elasticRankLostLocked(Job& job, const Session&, const std::string& what, RankLoss* loss) const {
  if (job.ranks_.count() == 0) return false;
  // Below min_size the new epoch waits for new ranks (housekeeping).
  const bool full = job.ranks_.count() >= job.spec_.min_size;
  job.elastic_->changeEpochLocked(job, what, &loss->to_ranks, /*admit=*/false, /*announce=*/full);
  if (!full) job.epochs_.waitBelowMinimum(Clock::now());
  return true;
}

void Job::OneNode::commitAdmittedLocked(Job& job, const std::string& commit, RankMessages* to_ranks) const {
  job.elastic_->changeEpochLocked(
      job, "admitted " + std::to_string(job.ranks_.readyJoinerCount()) + " new ranks at the commit '" + commit + "'",
      to_ranks, /*admit=*/true);  // admits the same joiners: both under the job's lock
}

std::string Job::OneNode::fillEpochLocked(Job& job, Clock::time_point now, RankMessages* to_ranks) const {
  const int admitted = job.ranks_.admitReadyJoiners();
  const int size = job.ranks_.count();
  const std::string& id = job.spec_.job_id;
  if (admitted > 0) {
    job.negotiation_.resize(size);  // the epoch that waited grows before anyone used it
    job.epochs_.grew(admitted, size);
  }
  if (size >= job.spec_.min_size) {
    job.epochs_.filled();
    GS_LOG(control, warn, "job '{}': epoch {} has {} ranks again (minimum {}): it goes on", id, job.epochs_.current(),
           size, job.spec_.min_size);
    job.elastic_->announceEpochLocked(job, job.epochs_.lastCause(), to_ranks);
    return "";
  }
  if (!job.epochs_.belowMinimumFor(job.spec_.elastic_timeout, now)) return "";
  job.failLocked(job.epochs_.belowMinimumFailure(job.spec_.min_size, job.negotiation_.size(), now));
  GS_LOG(control, warn, "job '{}' failed: {}", id, job.failure_);
  job.failAllLocked(aborted("job '" + id + "': " + job.failure_), to_ranks);
  job.elastic_->refuseAllLocked(job, job.failure_, to_ranks);
  return "";
}

bool Job::OneNode::admitsJoinersLocked(const Job& job, const coordinator::Response& response) const {
  return job.ranks_.readyJoinerCount() > 0 && Elastic::isCommitBarrier(response);
}

// --- The leader of a job across daemons: negotiates for every node and
// decides the epochs.

void Job::Leading::submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                                RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch) const {
  // Its own ranks: which cached response each request repeats (the
  // followers' ranks say so by cache id).
  if (session) request.repeats = job.cross_->cachedId(request);
  job.submission_->negotiateLocked(job, std::move(request), to_ranks, inline_batch);
}

void Job::Leading::otherNodesRequestFailedLocked(Job& job, const coordinator::Request& request, const Status& status,
                                                 bool membership_changed) const {
  if (!job.ranks_.registeredHere(request.rank) && !membership_changed) job.cross_->sendError(request, status);
}

bool Job::Leading::decidesTuningLocked(const Job& job) const { return job.awaiting_.started(); }

bool Job::Leading::elasticRankLostLocked(Job& job, const Session& session, const std::string& what,
                                         RankLoss* loss) const {
  loss->cross_failure =
      job.elastic_->leadEpochLocked(job, {session.rank()}, job.epochs_.current(), what, &loss->to_ranks);
  return true;
}

void Job::Leading::commitAdmittedLocked(Job& job, const std::string& commit, RankMessages* to_ranks) const {
  job.elastic_->admitAcrossLocked(job, "at the commit '" + commit + "'", to_ranks);
}

std::string Job::Leading::fillEpochLocked(Job& job, Clock::time_point now, RankMessages* to_ranks) const {
  if (job.elastic_->joinersWaitingLocked(job)) {
    job.elastic_->admitAcrossLocked(
        job, "while the job was below its minimum of " + std::to_string(job.spec_.min_size) + " ranks", to_ranks);
    return "";
  }
  if (!job.epochs_.belowMinimumFor(job.spec_.elastic_timeout, now)) return "";
  return job.epochs_.belowMinimumFailure(job.spec_.min_size, job.negotiation_.size(), now);
}

// --- A follower: its requests go to the leader, which decides.

void Job::Following::submitLocked(Job& job, const std::shared_ptr<Session>&, coordinator::Request request,
                                  RankMessages*, std::vector<coordinator::Response>*) const {
  job.cross_->forward(request.rank, coordinator::enqueueOf(request), job.epochs_.current());
  job.awaiting_.forwarded(std::move(request));
}

bool Job::Following::elasticRankLostLocked(Job& job, const Session& session, const std::string&, RankLoss* loss) const {
  // The leader decides the next epoch.
  loss->report.emplace(session.rank(), job.epochs_.current());
  job.epochs_.markEnding();
  // The node's last rank: the leader keeps the node when it knows of new
  // ranks waiting here, so they go first on the same stream.
  if (job.ranks_.count() == 0) loss->replacements = job.ranks_.unreportedJoiners(job.cross_->leaderChanges());
  return true;
}

std::vector<std::shared_ptr<Session>> Job::Following::joinersToReportLocked(Job& job) const {
  return job.ranks_.unreportedJoiners(job.cross_->leaderChanges());
}

// --- The place the job has now.

const Job::Place& Job::place() const {
  if (!cross_) return *one_node_;
  return cross_->isLeader() ? *leading_ : *following_;
}

}  // namespace gradsync::server
