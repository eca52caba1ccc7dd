// SPDX-License-Identifier: Apache-2.0
// Job, multi-node side: starting the node's role once every local rank has
// registered, requests forwarded from other nodes, the leader's batches, and
// failures reported by other nodes or met in the data plane.
#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/coordinator/request_wire.h"
#include "daemon/server/enqueue_validation.h"
#include "daemon/server/job.h"
#include "daemon/server/job_elastic.h"
#include "daemon/server/job_execution.h"

namespace gradsync::server {

void Job::startCrossNodeIfComplete() {
  std::vector<int> ranks;
  std::vector<int64_t> pids;
  {
    MutexLock lock(mutex_);
    // Claimed here: the last two ranks may register at the same moment.
    if (!cross_ || !formation_.claimStart(ranks_.count())) return;
    for (const auto& [rank, session] : ranks_.byRank()) {
      ranks.push_back(rank);
      pids.push_back(session->pid());
    }
  }
  cross_->start(ranks, pids);
  RankMessages to_ranks;
  std::vector<coordinator::Response> unused;
  {
    MutexLock lock(mutex_);
    for (auto& [session, request] : awaiting_.start())
      submitToCoordinator(session, std::move(request), &to_ranks, &unused);
  }
  flush(&to_ranks);
}

void Job::submitRemote(int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
  // Its arena lives on the other node, which checked the range.
  auto request = validateEnqueue(enqueue, enqueueContext(rank, nullptr, /*remote=*/true));
  RankMessages to_ranks;
  {
    MutexLock lock(mutex_);
    admitRemoteLocked(rank, std::move(request), &enqueue, epoch, &to_ranks);
  }
  flush(&to_ranks);
}

void Job::submitRemoteRepeats(std::vector<coordinator::Repeat> repeats, uint64_t epoch) {
  RankMessages to_ranks;
  {
    MutexLock lock(mutex_);
    for (coordinator::Repeat& repeat : repeats) admitRepeatLocked(std::move(repeat), epoch, &to_ranks);
  }
  flush(&to_ranks);
}

bool Job::isOtherNodesRankLocked(int rank) const {
  if (rank >= 0 && rank < negotiation_.size() && !ranks_.registeredHere(rank)) return true;
  GS_LOG(control, warn, "job '{}': a follower forwarded a request of rank {}, which it does not hold", spec_.job_id,
         rank);
  return false;
}

void Job::admitRemoteLocked(int rank, StatusOr<coordinator::Request> request, const v1::Enqueue* enqueue,
                            uint64_t epoch, RankMessages* to_ranks) {
  // The CrossNode checked the epoch on arrival, but this job may have
  // moved to the next one since: the rank's number is of the old epoch,
  // and its follower fails the request when it applies the new one (it
  // would otherwise wait in the new epoch's negotiator, in another
  // rank's name or as a duplicate of the rank's retry).
  if (epoch != 0 && epoch != epochs_.current()) return;
  if (!isOtherNodesRankLocked(rank)) return;
  std::vector<coordinator::Response> unused;  // (no inline batches across nodes)
  if (!request.isOk()) {
    coordinator::Request named;  // (only a checked enqueue fails here)
    named.rank = rank;
    failRequestLocked(enqueue != nullptr ? coordinator::requestOf(rank, *enqueue) : named,
                      Status(request.status().code(), "job '" + spec_.job_id + "' " + request.status().message()),
                      to_ranks);
  } else if (!failure_.empty() || stopping_) {
    failRequestLocked(*request, aborted("job '" + spec_.job_id + "': " + failure_), to_ranks);
  } else {
    submitToCoordinator(nullptr, std::move(request).value(), to_ranks, &unused);
  }
}

void Job::admitRepeatLocked(coordinator::Repeat repeat, uint64_t epoch, RankMessages* to_ranks) {
  if (epoch != 0 && epoch != epochs_.current()) return;  // (as in admitRemoteLocked)
  std::vector<int>& ranks = repeat.ranks;
  ranks.erase(std::remove_if(ranks.begin(), ranks.end(),
                             [&](int rank) GS_REQUIRES(mutex_) { return !isOtherNodesRankLocked(rank); }),
              ranks.end());
  if (!failure_.empty() || stopping_) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      failRequestLocked(repeat.request(i), aborted("job '" + spec_.job_id + "': " + failure_), to_ranks);
    }
    return;
  }
  if (ranks.empty()) return;
  for (int rank : ranks) timeline_.requestArrived(repeat.cached->name, repeat.cached->type, rank);
  coordinator::Negotiator::Repeated submitted = negotiation_.submit(repeat, Clock::now());
  for (const auto& [request, status] : submitted.refused) {
    timeline_.negotiated(request.name, request.type);
    failRequestLocked(request, status, to_ranks);
  }
  std::vector<coordinator::Response> unused;  // (no inline batches across nodes)
  readyLocked(std::move(submitted.ready), &unused);
}

void Job::onRemoteBatch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
                        uint64_t fusion_threshold_bytes) {
  MutexLock lock(mutex_);
  if (stopping_) return;  // negotiated work still runs after a rank left
  // Sent before the leader changed the epoch; its requests failed with the
  // change here (the leader, too, fails it).
  if (spec_.elastic && epoch != epochs_.current()) return;
  // Before any Done of the batch: a local rank told a new set's id may use
  // it at once, and its enqueue is checked here.
  negotiation_.publish(batch, /*from_leader=*/true);
  queue_.addRemote({std::move(batch), sequence, fusion_threshold_bytes});
  execution_->wake();
}

void Job::failJob(const peer::CrossNode::Failure& failure, bool detected_here) {
  const std::string& cause = failure.cause;
  const bool node_lost = failure.node_lost;
  RankMessages to_ranks;
  std::string bare;
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    if (!failure_.empty() && !node_lost) return;
    if (failure_.empty()) {
      failLocked(cause);
      GS_LOG(control, warn, "job '{}' failed: {}{}", spec_.job_id, failure_,
             failure.heard_from.empty() ? "" : " (heard from " + failure.heard_from + ")");
    }
    const std::string job = "job '" + spec_.job_id + "': ";
    const std::string named = cause.rfind(job, 0) == 0 ? cause : job + cause;
    bare = named.substr(job.size());  // (the transfers' errors add the job)
    // The other nodes hear the cause before any collective fails with it
    // (the leader's errors for their requests go on the same streams):
    // their ranks, told the error, may exit at once, and that exit must
    // not become the job's cause there. What the peer side handed over it
    // told them already.
    if (cross_ && detected_here) cross_->failedHere(named, node_lost);
    // A lost node (or data plane) also ends what was negotiated: it cannot
    // run any more. A rank that left elsewhere only ends what waits for it.
    failAllLocked(aborted(named), &to_ranks, /*keep_negotiated=*/!node_lost);
    if (spec_.elastic) elastic_->refuseAllLocked(*this, failure_, &to_ranks);
    execution_->wake();
  }
  state_cv_.notify_all();
  // Transfers with a lost node would otherwise wait for the transfer
  // timeout. The local ranks hear last: they may exit at once, closing
  // this node's part of the ring.
  if (cross_ && node_lost) cross_->abortTransfers(bare);
  flush(&to_ranks);
}

namespace {
constexpr auto kRingCauseGrace = std::chrono::milliseconds(500);
}  // namespace

void Job::localPartFailed(const Status& cause) {
  std::string failure;
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    if (spec_.elastic) {
      // A rank gone starts a new epoch, which ends the peers' waits: give
      // it the time the leader may take to start it. Ranks that stay (the
      // failure was not theirs to leave over) start none, and the peers
      // would wait until their transfers' timeout.
      GS_LOG(executor, warn, "job '{}': this node's part failed on host {}: {}", spec_.job_id, limits_.hostname,
             cause.message());
      state_cv_.wait_for(lock, std::chrono::milliseconds(peer::CrossNode::kSilenceLimitMs + 1000),
                         [&]() GS_REQUIRES(mutex_) {
                           return stopping_ || !failure_.empty() || epochs_.current() != execution_->batchEpoch();
                         });
      if (stopping_ || epochs_.current() != execution_->batchEpoch()) return;
    }
    failure = failure_;
  }
  // A job that failed already (a rank left: the peers still run what was
  // negotiated) keeps its cause, but the peers' waits in this response end
  // now: it cannot complete without this node's part.
  failJob(failure.empty() ? "the daemon on host " + limits_.hostname + " could not take its part: " + cause.message()
                          : failure,
          /*node_lost=*/true);
}

Status Job::ringFailed(const Status& status) {
  // The node that broke the ring usually says why through the peer service
  // at about the same moment (a rank of it died, it lost the leader): give
  // that message a moment to arrive. An elastic job's leader may take up to
  // the silence limit to start the next epoch; an election of a new leader
  // (failover), once under way, up to its voting limit.
  const auto settled = [&]() GS_REQUIRES(mutex_) {
    return !failure_.empty() || stopping_ || epochs_.current() != execution_->batchEpoch();
  };
  const auto waitSettled = [&](std::chrono::milliseconds grace) GS_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return state_cv_.wait_for(lock, grace, settled);
  };
  if (!waitSettled(spec_.elastic ? std::chrono::milliseconds(peer::CrossNode::kSilenceLimitMs + 1000)
                                 : std::chrono::duration_cast<std::chrono::milliseconds>(kRingCauseGrace)) &&
      spec_.elastic && cross_->electing()) {
    (void)waitSettled(std::chrono::milliseconds(peer::CrossNode::kVotingLimitMs + 1000));
  }
  std::string cause;
  {
    MutexLock lock(mutex_);
    if (spec_.elastic && failure_.empty() && !stopping_ && epochs_.current() != execution_->batchEpoch()) {
      return aborted("job '" + spec_.job_id + "': the membership changed during the collective (epoch " +
                     std::to_string(execution_->batchEpoch()) + " -> " + std::to_string(epochs_.current()) +
                     "): " + epochs_.lastCause());
    }
    cause = failure_;
  }
  // The job's cause leads, for this call and for everything else of the
  // job that fails with it.
  const Status failed = cause.empty() || status.message().find(cause) != std::string::npos
                            ? status
                            : Status(status.code(), cause + " (then " + status.message() + ")");
  failJob(failed.message(), /*node_lost=*/true);
  return failed;
}

}  // namespace gradsync::server
