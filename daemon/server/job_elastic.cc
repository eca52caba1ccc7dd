// SPDX-License-Identifier: Apache-2.0
// Job, elastic side (single-node jobs): a lost rank moves the job to a new
// epoch with the survivors. What was in flight fails as retriable
// (ErrorDetail.membership_changed); the survivors keep their order and are
// renumbered 0..n-1; each is told its place (MembershipChange) and takes
// it up when its client rejoins (gradsync_rejoin), after which its
// collectives carry the new epoch. Collectives of another epoch are refused,
// so no rank's old-epoch call can pair with another's new-epoch one.
#include <algorithm>
#include <chrono>

#include "daemon/common/logging.h"
#include "daemon/server/job.h"

namespace gradsync::server {
namespace {

// To a rank waiting in its rejoin (or to join): the job will not take it.
v1::DaemonMessage refusal(const std::string& cause) {
  v1::DaemonMessage message;
  message.mutable_membership_change()->set_refused(true);
  message.mutable_membership_change()->set_cause(cause);
  return message;
}

}  // namespace

Status Job::addJoiner(std::shared_ptr<Session> session) {
  MutexLock lock(mutex_);
  if (!spec_.elastic) return failedPrecondition("job '" + spec_.job_id + "' is not elastic: it takes no new ranks");
  if (!failure_.empty()) return failedPrecondition("job '" + spec_.job_id + "' has failed: " + failure_);
  if (stopping_) return unavailable("job '" + spec_.job_id + "' is stopping");
  if (sessions_.empty() && joiners_.empty() && !spec_.joins_running) {
    return failedPrecondition("job '" + spec_.job_id + "' has no ranks left to join");
  }
  joiners_.push_back(std::move(session));
  GS_LOG(control, info, "job '{}': a rank waits to join at the next commit ({} waiting)", spec_.job_id,
         joiners_.size());
  return okStatus();
}

void Job::refuseJoinersLocked(const std::string& cause, Outbox* outbox) {
  for (const auto& joiner : joiners_) {
    outbox->emplace_back(joiner, refusal("job '" + spec_.job_id + "' takes no new rank: " + cause));
  }
  joiners_.clear();
}

bool Job::isCommitBarrier(const coordinator::Response& response) {
  if (response.type != v1::BARRIER || !response.status.isOk()) return false;
  return std::all_of(response.requests.begin(), response.requests.end(),
                     [](const auto& request) { return request && request->commit; });
}

bool Job::admitsJoinersLocked(const coordinator::Response& response, const executor::ResponseResult& result) const {
  if (!spec_.elastic || !result.status.isOk() || batch_epoch_ != epoch_ || !failure_.empty() || stopping_) return false;
  // Across daemons the leader decided before it sent the batch.
  if (cross_) return response.admits_joiners;
  // Only joiners whose session stream is open: the word of their place goes
  // over it (a message to a session without one would be lost).
  const bool ready = std::any_of(joiners_.begin(), joiners_.end(), [](const auto& j) { return j->streamAttached(); });
  return ready && isCommitBarrier(response);
}

int Job::admitReadyJoinersLocked() {
  int admitted = 0;
  for (auto it = joiners_.begin(); it != joiners_.end();) {
    if (!(*it)->streamAttached()) {  // a later chance takes it
      ++it;
      continue;
    }
    const int rank = sessions_.empty() ? 0 : sessions_.rbegin()->first + 1;  // after the ranks there are
    (*it)->renumber(rank);
    sessions_.emplace(rank, std::move(*it));
    it = joiners_.erase(it);
    ++admitted;
  }
  return admitted;
}

void Job::resizeLocked(int size) {
  size_.store(size);
  local_ranks_.clear();
  for (const auto& [rank, session] : sessions_) local_ranks_.insert(rank);
  // Process sets named ranks of the old numbering: only the global one stays.
  negotiator_ = coordinator::Negotiator(spec_.job_id, size, {});
  std::atomic_store(&process_sets_, std::make_shared<const coordinator::ProcessSetTable>(negotiator_.processSets()));
}

void Job::changeEpochLocked(const std::string& cause, Outbox* outbox, bool admit, bool announce) {
  const int before = size_.load();
  if (admit) admitReadyJoinersLocked();
  std::vector<int> survivors;  // one node holds them all: its sessions, joiners appended
  for (const auto& [rank, session] : sessions_) survivors.push_back(rank);
  enterEpochLocked(epoch_ + 1, survivors, {}, static_cast<int>(survivors.size()), before, cause, outbox, announce);
}

void Job::enterEpochLocked(uint64_t next, const std::vector<int>& survivors, const Admitted& admitted, int after,
                           int before, const std::string& cause, Outbox* outbox, bool announce) {
  const Status changed =
      aborted("job '" + spec_.job_id + "': membership changed (epoch " + std::to_string(epoch_) + " -> " +
              std::to_string(next) + "): " + cause + "; the job goes on with " + std::to_string(after) + " ranks");
  const size_t failed = failAllLocked(changed, outbox, /*keep_negotiated=*/false, /*membership_changed=*/true);
  // Survivors keep their order.
  SessionSnapshot renumbered;
  for (const auto& [rank, session] : sessions_) {
    auto at = std::lower_bound(survivors.begin(), survivors.end(), rank);
    if (at == survivors.end() || *at != rank) {
      outbox->emplace_back(session, refusal("job '" + spec_.job_id + "' left " + session->describe() +
                                            " out of epoch " + std::to_string(next) + ": " + cause));
      continue;
    }
    const int new_rank = static_cast<int>(at - survivors.begin());
    session->renumber(new_rank);
    renumbered.emplace(new_rank, session);
  }
  for (const auto& [rank, session] : admitted) {
    session->renumber(rank);
    renumbered.emplace(rank, session);
  }
  sessions_ = std::move(renumbered);
  resizeLocked(after);
  stalls_.clear();
  outputs_.clear();
  epoch_ = next;
  epoch_started_ = Clock::now();
  epoch_ending_ = false;
  grant_cv_.notify_all();  // an output wait of the old epoch ends now

  v1::EpochChange record;
  record.set_epoch(next);
  record.set_cause(cause);
  record.set_size_before(before);
  record.set_size_after(after);
  record.set_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  record.set_failed_collectives(static_cast<int>(failed));
  history_.push_back(record);
  GS_LOG(control, warn, "job '{}': epoch {} -> {}: {}; {} -> {} ranks, {} collectives failed (retriable){}",
         spec_.job_id, next - 1, next, cause, before, after, failed,
         announce ? ""
                  : "; waiting for new ranks up to the elastic timeout (below the minimum " +
                        std::to_string(spec_.min_size) + ")");
  if (announce) announceEpochLocked(cause, outbox);
}

void Job::announceEpochLocked(const std::string& cause, Outbox* outbox) {
  int local_rank = 0;  // this node's ranks in rank order
  for (const auto& [rank, session] : sessions_) {
    v1::DaemonMessage message;
    v1::MembershipChange* change = message.mutable_membership_change();
    change->set_epoch(epoch_);
    change->set_rank(rank);
    change->set_size(size_.load());
    change->set_local_rank(local_rank++);
    change->set_local_size(static_cast<int>(sessions_.size()));
    change->set_cause(cause);
    outbox->emplace_back(session, std::move(message));
  }
}

std::string Job::belowMinimumFailure(Clock::time_point now) const {
  const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - *below_min_since_).count();
  return "the elastic job stayed below its minimum of " + std::to_string(spec_.min_size) + " ranks for " +
         std::to_string(waited) + " s (" + std::to_string(size_.load()) +
         " ranks, no new rank came; last change: " + history_.back().cause() + ")";
}

std::string Job::fillEpochLocked(Clock::time_point now, Outbox* outbox) {
  if (!below_min_since_ || !failure_.empty() || stopping_) return "";
  if (cross_) return fillAcrossLocked(now, outbox);
  const int admitted = admitReadyJoinersLocked();
  const int size = static_cast<int>(sessions_.size());
  if (admitted > 0) {
    resizeLocked(size);  // the epoch that waited grows before anyone used it
    v1::EpochChange& record = history_.back();
    record.set_size_after(size);
    record.set_cause(record.cause() + "; then admitted " + std::to_string(admitted) + " new ranks");
  }
  if (size >= spec_.min_size) {
    below_min_since_.reset();
    GS_LOG(control, warn, "job '{}': epoch {} has {} ranks again (minimum {}): it goes on", spec_.job_id, epoch_, size,
           spec_.min_size);
    announceEpochLocked(history_.back().cause(), outbox);
    return "";
  }
  if (now - *below_min_since_ < spec_.elastic_timeout) return "";
  failure_ = belowMinimumFailure(now);
  GS_LOG(control, warn, "job '{}' failed: {}", spec_.job_id, failure_);
  failAllLocked(aborted("job '" + spec_.job_id + "': " + failure_), outbox);
  refuseAllLocked(failure_, outbox);
  return "";
}

void Job::refuseAllLocked(const std::string& cause, Outbox* outbox) {
  refuseJoinersLocked(cause, outbox);
  // The survivors may wait in rejoin: the refusal ends it with the cause.
  for (const auto& [rank, session] : sessions_) {
    outbox->emplace_back(session, refusal("job '" + spec_.job_id + "': " + cause));
  }
}

std::vector<std::shared_ptr<Session>> Job::stoppedRanks(Clock::time_point now) {
  std::vector<std::shared_ptr<Session>> stopped;
  if (!spec_.elastic) return stopped;
  SessionSnapshot sessions;
  {
    MutexLock lock(mutex_);
    if (!failure_.empty() || stopping_) return stopped;
    sessions = sessions_;
  }
  std::map<uint64_t, Clock::time_point> still;  // housekeeping thread only, like stopped_since_
  for (const auto& [rank, session] : sessions) {
    if (!session->processStopped()) continue;
    auto it = stopped_since_.find(session->id());
    const Clock::time_point since = it == stopped_since_.end() ? now : it->second;
    still[session->id()] = since;
    if (now - since >= kStoppedRankLimit) stopped.push_back(session);
  }
  stopped_since_ = std::move(still);
  return stopped;
}

bool Job::refuseStaleEpochLocked(const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue, Outbox* outbox) {
  if (!spec_.elastic || enqueue.epoch() == epoch_) return false;
  coordinator::Request request;
  request.rank = session->rank();
  request.handle = enqueue.handle();
  request.name = enqueue.name();
  countErrorLocked(StatusCode::kAborted);
  session->removeHandle(enqueue.handle());
  // Straight to the session: a joiner not yet admitted is not among the ranks.
  outbox->emplace_back(session,
                       doneMessage(spec_.job_id, request,
                                   aborted("job '" + spec_.job_id + "': " + session->describe() +
                                           "'s collective belongs to epoch " + std::to_string(enqueue.epoch()) +
                                           ", the job is at epoch " + std::to_string(epoch_) + " (rejoin first)"),
                                   /*membership_changed=*/true));
  return true;
}

}  // namespace gradsync::server
