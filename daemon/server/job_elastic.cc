// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_elastic.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "daemon/common/logging.h"
#include "daemon/server/done_messages.h"
#include "daemon/server/job_place.h"

namespace gradsync::server {

// --- From outside.

Status Job::Elastic::addJoiner(std::shared_ptr<Session> session) {
  const std::string& id = job_.spec_.job_id;
  MutexLock lock(job_.mutex_);
  if (!job_.spec_.elastic) return failedPrecondition("job '" + id + "' is not elastic: it takes no new ranks");
  if (!job_.failure_.empty()) return failedPrecondition("job '" + id + "' has failed: " + job_.failure_);
  if (job_.stopping_) return unavailable("job '" + id + "' is stopping");
  if (job_.ranks_.empty() && !job_.spec_.joins_running) {
    return failedPrecondition("job '" + id + "' has no ranks left to join");
  }
  job_.ranks_.addJoiner(std::move(session));
  GS_LOG(control, info, "job '{}': a rank waits to join at the next commit ({} waiting)", id,
         job_.ranks_.joinerCount());
  return okStatus();
}

std::vector<std::shared_ptr<Session>> Job::Elastic::stoppedRanks(Clock::time_point now) {
  std::vector<std::shared_ptr<Session>> stopped;
  if (!job_.spec_.elastic) return stopped;
  SessionSnapshot sessions;
  {
    MutexLock lock(job_.mutex_);
    if (!job_.failure_.empty() || job_.stopping_) return stopped;
    sessions = job_.ranks_.byRank();
  }
  std::map<uint64_t, std::shared_ptr<Session>> by_id;
  std::vector<uint64_t> stopped_now;
  for (const auto& [rank, session] : sessions) {
    if (!session->processStopped()) continue;
    by_id[session->id()] = session;
    stopped_now.push_back(session->id());
  }
  for (uint64_t id : stopped_.review(stopped_now, now)) stopped.push_back(by_id[id]);
  return stopped;
}

void Job::Elastic::housekeeping(Clock::time_point now) {
  if (!job_.spec_.elastic) return;
  if (job_.cross_) reportJoiners();
  RankMessages to_ranks;
  std::string failure;
  {
    MutexLock lock(job_.mutex_);
    // Below min_size: the place admits the joiners there are (across
    // daemons, the leader), or says why the job fails.
    if (job_.epochs_.belowMinimum() && job_.failure_.empty() && !job_.stopping_) {
      failure = job_.place().fillEpochLocked(job_, now, &to_ranks);
    }
  }
  flush(&to_ranks);
  if (!failure.empty()) job_.failJob(failure, /*node_lost=*/false);
}

void Job::Elastic::reportJoiners() {
  std::vector<std::shared_ptr<Session>> ready;
  {
    MutexLock lock(job_.mutex_);
    if (!job_.failure_.empty() || job_.stopping_) return;
    ready = job_.place().joinersToReportLocked(job_);
  }
  for (const auto& joiner : ready) job_.cross_->reportJoiner(joiner->id(), joiner->pid(), joiner->describe());
}

void Job::Elastic::ranksLost(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause) {
  RankMessages to_ranks;
  std::string failure;
  {
    MutexLock lock(job_.mutex_);
    if (!job_.failure_.empty() || job_.stopping_) return;
    failure = leadEpochLocked(job_, ranks, epoch, cause, &to_ranks);
  }
  job_.state_cv_.notify_all();
  flush(&to_ranks);
  if (!failure.empty()) job_.failJob(failure, /*node_lost=*/true);
}

void Job::Elastic::newEpoch(const v1::NewEpoch& change) {
  RankMessages to_ranks;
  std::string gap;
  std::vector<int> vanished;
  {
    MutexLock lock(job_.mutex_);
    const uint64_t current = job_.epochs_.current();
    if (!job_.failure_.empty() || job_.stopping_ || change.epoch() <= current) return;
    // Survivors are numbered as in the epoch before: only the next one
    // applies, unless this node held no rank (it joins the job now).
    if (change.epoch() != current + 1 && job_.ranks_.count() > 0) {
      gap = "job '" + job_.spec_.job_id + "': the leader moved from epoch " + std::to_string(current) + " to " +
            std::to_string(change.epoch()) + " without telling this node the epochs between";
    } else {
      vanished = applyNewEpochLocked(job_, change, &to_ranks);
    }
  }
  job_.state_cv_.notify_all();
  flush(&to_ranks);
  if (!gap.empty()) job_.failJob(gap, /*node_lost=*/true);
  // A joiner that left between its report and its admission: lost at once.
  for (int rank : vanished) {
    job_.cross_->reportRankLost(rank, change.epoch(),
                                "a joining rank (" + std::to_string(rank) + ") left before its admission");
  }
}

// --- Steps of the job's.

bool Job::Elastic::isCommitBarrier(const coordinator::Response& response) {
  if (response.type != v1::BARRIER || !response.status.isOk()) return false;
  return std::all_of(response.requests.begin(), response.requests.end(),
                     [](const auto& request) { return request && request->commit; });
}

void Job::Elastic::changeEpochLocked(Job& job, const std::string& cause, RankMessages* to_ranks, bool admit,
                                     bool announce) {
  const int before = job.negotiation_.size();
  if (admit) job.ranks_.admitReadyJoiners();
  std::vector<int> survivors;  // one node holds them all: its sessions, joiners appended
  for (const auto& [rank, session] : job.ranks_.byRank()) survivors.push_back(rank);
  enterEpochLocked(job, job.epochs_.current() + 1, survivors, {}, static_cast<int>(survivors.size()), before, cause,
                   to_ranks, announce);
}

void Job::Elastic::enterEpochLocked(Job& job, uint64_t next, const std::vector<int>& survivors,
                                    const Admitted& admitted, int after, int before, const std::string& cause,
                                    RankMessages* to_ranks, bool announce) {
  const std::string& id = job.spec_.job_id;
  const Status changed =
      aborted("job '" + id + "': membership changed (epoch " + std::to_string(job.epochs_.current()) + " -> " +
              std::to_string(next) + "): " + cause + "; the job goes on with " + std::to_string(after) + " ranks");
  const size_t failed = job.failAllLocked(changed, to_ranks, /*keep_negotiated=*/false, /*membership_changed=*/true);
  // Survivors keep their order.
  for (auto& refused : job.ranks_.renumber(next, survivors, admitted, cause)) to_ranks->push_back(std::move(refused));
  job.negotiation_.resize(after);
  job.outputs_.newEpoch(next);
  job.epochs_.enter(next, cause, before, after, static_cast<int>(failed), Clock::now());
  job.state_cv_.notify_all();  // an output wait of the old epoch ends now
  GS_LOG(control, warn, "job '{}': epoch {} -> {}: {}; {} -> {} ranks, {} collectives failed (retriable){}", id,
         next - 1, next, cause, before, after, failed,
         announce ? ""
                  : "; waiting for new ranks up to the elastic timeout (below the minimum " +
                        std::to_string(job.spec_.min_size) + ")");
  if (announce) announceEpochLocked(job, cause, to_ranks);
}

void Job::Elastic::announceEpochLocked(Job& job, const std::string& cause, RankMessages* to_ranks) {
  for (auto& place : job.ranks_.places(job.epochs_.current(), job.negotiation_.size(), cause)) {
    to_ranks->push_back(std::move(place));
  }
}

std::string Job::Elastic::leadEpochLocked(Job& job, const std::vector<int>& ranks, uint64_t epoch,
                                          const std::string& cause, RankMessages* to_ranks) {
  auto change = job.cross_->beginEpoch(ranks, epoch, cause);
  if (!change.isOk()) {
    // NOT_FOUND: another report of the same loss came first.
    return change.status().code() == StatusCode::kNotFound ? "" : change.status().message();
  }
  applyNewEpochLocked(job, *change, to_ranks);
  return "";
}

std::vector<int> Job::Elastic::applyNewEpochLocked(Job& job, const v1::NewEpoch& change, RankMessages* to_ranks) {
  Admitted admitted;
  std::vector<int> vanished;
  for (const auto& entry : change.admitted()) {
    if (entry.peer_address() != job.limits_.peer_address) continue;
    std::shared_ptr<Session> joiner = job.ranks_.takeJoiner(entry.joiner_id());
    if (!joiner) {
      vanished.push_back(entry.rank());
      continue;
    }
    admitted.emplace_back(entry.rank(), std::move(joiner));
  }
  // Below the minimum no rank is told its place: they wait (in rejoin) for
  // the epoch that admits enough joiners, or for the leader's timeout.
  enterEpochLocked(job, change.epoch(), {change.survivors().begin(), change.survivors().end()}, admitted,
                   change.survivors_size() + change.admitted_size(), job.negotiation_.size(), change.cause(), to_ranks,
                   /*announce=*/!change.below_minimum());
  if (!change.below_minimum()) {
    job.epochs_.filled();
  } else {
    job.epochs_.waitBelowMinimum(Clock::now());
  }
  return vanished;
}

void Job::Elastic::admitAcrossLocked(Job& job, const std::string& when, RankMessages* to_ranks) {
  auto change = job.cross_->admitJoiners(job.ranks_.readyJoinerIds(), when);
  if (!change.isOk()) {
    GS_LOG(control, warn, "job '{}': new ranks were to join {}: {}", job.spec_.job_id, when, change.status().message());
    return;
  }
  applyNewEpochLocked(job, *change, to_ranks);
}

bool Job::Elastic::joinersWaitingLocked(const Job& job) const {
  return job.cross_->hasPendingJoiners() || job.ranks_.readyJoinerCount() > 0;
}

void Job::Elastic::markAdmissionLocked(Job& job, std::vector<coordinator::Response>* batch) {
  if (!job.spec_.elastic || !job.cross_ || !job.failure_.empty() || job.stopping_) return;
  if (!joinersWaitingLocked(job)) return;
  for (auto& response : *batch) {
    if (!isCommitBarrier(response)) continue;
    response.admits_joiners = true;
    return;
  }
}

bool Job::Elastic::admitsJoinersLocked(const Job& job, const coordinator::Response& response,
                                       const executor::ResponseResult& result, uint64_t batch_epoch) const {
  if (!job.spec_.elastic || !result.status.isOk() || batch_epoch != job.epochs_.current() || !job.failure_.empty() ||
      job.stopping_) {
    return false;
  }
  return job.place().admitsJoinersLocked(job, response);
}

bool Job::Elastic::refuseStaleEpochLocked(Job& job, const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue,
                                          RankMessages* to_ranks) {
  const uint64_t current = job.epochs_.current();
  if (!job.spec_.elastic || enqueue.epoch() == current) return false;
  coordinator::Request request;
  request.rank = session->rank();
  request.handle = enqueue.handle();
  request.name = enqueue.name();
  job.stats_.failed(StatusCode::kAborted);
  session->removeHandle(enqueue.handle());
  // Straight to the session: a joiner not yet admitted is not among the ranks.
  const std::string& id = job.spec_.job_id;
  to_ranks->emplace_back(
      session, doneMessage(id, request,
                           aborted("job '" + id + "': " + session->describe() + "'s collective belongs to epoch " +
                                   std::to_string(enqueue.epoch()) + ", the job is at epoch " +
                                   std::to_string(current) + " (rejoin first)"),
                           /*membership_changed=*/true));
  return true;
}

void Job::Elastic::refuseJoinersLocked(Job& job, const std::string& cause, RankMessages* to_ranks) {
  for (auto& refused : job.ranks_.refuseJoiners(cause)) to_ranks->push_back(std::move(refused));
}

void Job::Elastic::refuseAllLocked(Job& job, const std::string& cause, RankMessages* to_ranks) {
  refuseJoinersLocked(job, cause, to_ranks);
  // The survivors may wait in rejoin: the refusal ends it with the cause.
  for (auto& refused : job.ranks_.refuseRanks(cause)) to_ranks->push_back(std::move(refused));
}

}  // namespace gradsync::server
