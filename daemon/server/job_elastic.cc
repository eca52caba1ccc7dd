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
#include "daemon/server/done_messages.h"
#include "daemon/server/job.h"
#include "daemon/server/job_place.h"

namespace gradsync::server {
Status Job::addJoiner(std::shared_ptr<Session> session) {
  MutexLock lock(mutex_);
  if (!spec_.elastic) return failedPrecondition("job '" + spec_.job_id + "' is not elastic: it takes no new ranks");
  if (!failure_.empty()) return failedPrecondition("job '" + spec_.job_id + "' has failed: " + failure_);
  if (stopping_) return unavailable("job '" + spec_.job_id + "' is stopping");
  if (ranks_.empty() && !spec_.joins_running) {
    return failedPrecondition("job '" + spec_.job_id + "' has no ranks left to join");
  }
  ranks_.addJoiner(std::move(session));
  GS_LOG(control, info, "job '{}': a rank waits to join at the next commit ({} waiting)", spec_.job_id,
         ranks_.joinerCount());
  return okStatus();
}

void Job::refuseJoinersLocked(const std::string& cause, RankMessages* to_ranks) {
  for (auto& refused : ranks_.refuseJoiners(cause)) to_ranks->push_back(std::move(refused));
}

bool Job::isCommitBarrier(const coordinator::Response& response) {
  if (response.type != v1::BARRIER || !response.status.isOk()) return false;
  return std::all_of(response.requests.begin(), response.requests.end(),
                     [](const auto& request) { return request && request->commit; });
}

bool Job::admitsJoinersLocked(const coordinator::Response& response, const executor::ResponseResult& result,
                              uint64_t batch_epoch) const {
  if (!spec_.elastic || !result.status.isOk() || batch_epoch != epochs_.current() || !failure_.empty() || stopping_) {
    return false;
  }
  return place().admitsJoinersLocked(*this, response);
}

void Job::changeEpochLocked(const std::string& cause, RankMessages* to_ranks, bool admit, bool announce) {
  const int before = negotiation_.size();
  if (admit) ranks_.admitReadyJoiners();
  std::vector<int> survivors;  // one node holds them all: its sessions, joiners appended
  for (const auto& [rank, session] : ranks_.byRank()) survivors.push_back(rank);
  enterEpochLocked(epochs_.current() + 1, survivors, {}, static_cast<int>(survivors.size()), before, cause, to_ranks,
                   announce);
}

void Job::enterEpochLocked(uint64_t next, const std::vector<int>& survivors, const Admitted& admitted, int after,
                           int before, const std::string& cause, RankMessages* to_ranks, bool announce) {
  const Status changed =
      aborted("job '" + spec_.job_id + "': membership changed (epoch " + std::to_string(epochs_.current()) + " -> " +
              std::to_string(next) + "): " + cause + "; the job goes on with " + std::to_string(after) + " ranks");
  const size_t failed = failAllLocked(changed, to_ranks, /*keep_negotiated=*/false, /*membership_changed=*/true);
  // Survivors keep their order.
  for (auto& refused : ranks_.renumber(next, survivors, admitted, cause)) to_ranks->push_back(std::move(refused));
  negotiation_.resize(after);
  outputs_.newEpoch(next);
  epochs_.enter(next, cause, before, after, static_cast<int>(failed), Clock::now());
  state_cv_.notify_all();  // an output wait of the old epoch ends now
  GS_LOG(control, warn, "job '{}': epoch {} -> {}: {}; {} -> {} ranks, {} collectives failed (retriable){}",
         spec_.job_id, next - 1, next, cause, before, after, failed,
         announce ? ""
                  : "; waiting for new ranks up to the elastic timeout (below the minimum " +
                        std::to_string(spec_.min_size) + ")");
  if (announce) announceEpochLocked(cause, to_ranks);
}

void Job::announceEpochLocked(const std::string& cause, RankMessages* to_ranks) {
  for (auto& place : ranks_.places(epochs_.current(), negotiation_.size(), cause))
    to_ranks->push_back(std::move(place));
}

std::string Job::fillEpochLocked(Clock::time_point now, RankMessages* to_ranks) {
  if (!epochs_.belowMinimum() || !failure_.empty() || stopping_) return "";
  return place().fillEpochLocked(*this, now, to_ranks);
}

void Job::refuseAllLocked(const std::string& cause, RankMessages* to_ranks) {
  refuseJoinersLocked(cause, to_ranks);
  // The survivors may wait in rejoin: the refusal ends it with the cause.
  for (auto& refused : ranks_.refuseRanks(cause)) to_ranks->push_back(std::move(refused));
}

std::vector<std::shared_ptr<Session>> Job::stoppedRanks(Clock::time_point now) {
  std::vector<std::shared_ptr<Session>> stopped;
  if (!spec_.elastic) return stopped;
  SessionSnapshot sessions;
  {
    MutexLock lock(mutex_);
    if (!failure_.empty() || stopping_) return stopped;
    sessions = ranks_.byRank();
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

bool Job::refuseStaleEpochLocked(const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue,
                                 RankMessages* to_ranks) {
  if (!spec_.elastic || enqueue.epoch() == epochs_.current()) return false;
  coordinator::Request request;
  request.rank = session->rank();
  request.handle = enqueue.handle();
  request.name = enqueue.name();
  stats_.failed(StatusCode::kAborted);
  session->removeHandle(enqueue.handle());
  // Straight to the session: a joiner not yet admitted is not among the ranks.
  to_ranks->emplace_back(
      session, doneMessage(spec_.job_id, request,
                           aborted("job '" + spec_.job_id + "': " + session->describe() +
                                   "'s collective belongs to epoch " + std::to_string(enqueue.epoch()) +
                                   ", the job is at epoch " + std::to_string(epochs_.current()) + " (rejoin first)"),
                           /*membership_changed=*/true));
  return true;
}

}  // namespace gradsync::server
