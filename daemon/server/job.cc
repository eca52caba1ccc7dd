// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job.h"
#include "daemon/server/done_messages.h"
#include "daemon/server/job_across_daemons.h"
#include "daemon/server/job_elastic.h"
#include "daemon/server/job_execution.h"
#include "daemon/server/job_place.h"
#include "daemon/server/job_submission.h"

#include <algorithm>

#include "daemon/common/logging.h"

namespace gradsync::server {
namespace {

// The fusion threshold and cycle time a job starts with. On one daemon
// nothing waits for more collectives unless autotune finds it pays.
autotune::Settings initialTuning(const JobSpec& spec, const JobLimits& limits) {
  const bool across = spec.local_size < spec.size;
  return {limits.fusion_threshold_bytes, across
                                             ? std::chrono::duration_cast<std::chrono::microseconds>(limits.cycle_time)
                                             : std::chrono::microseconds(0)};
}

std::optional<autotune::Options> autotuneOptions(const JobSpec& spec, const JobLimits& limits) {
  const auto& asked = spec.autotune;
  if (asked.mode == v1::AUTOTUNE_OFF || (asked.mode == v1::AUTOTUNE_DAEMON_DEFAULT && !limits.autotune)) {
    return std::nullopt;
  }
  autotune::Options options = limits.autotune_options;
  if (asked.warmup_samples != 0) options.warmup_samples = asked.warmup_samples;
  if (asked.steps_per_sample != 0) options.steps_per_sample = asked.steps_per_sample;
  if (asked.samples_per_setting != 0) options.samples_per_setting = asked.samples_per_setting;
  // The steady-state rounds across daemons run what every daemon has as
  // soon as it has it: no cycle there to tune.
  if (spec.local_size < spec.size && limits.steady_state_rounds && !spec.elastic) options.cycle_times.clear();
  return options;
}

}  // namespace

Job::Job(JobSpec spec, JobLimits limits, executor::ReducePool* pool)
    : spec_(std::move(spec)),
      limits_(limits),
      negotiation_(spec_.job_id, spec_.size, spec_.process_sets, limits_.stall_deadline),
      ranks_(spec_.job_id),
      tuning_(spec_.job_id, initialTuning(spec_, limits_), autotuneOptions(spec_, limits_)),
      formation_({spec_.job_id, spec_.size, spec_.local_size, limits_.join_timeout, limits_.hostname}),
      one_node_(std::make_unique<OneNode>()),
      leading_(std::make_unique<Leading>()),
      following_(std::make_unique<Following>()),
      submission_(std::make_unique<Submission>(*this)),
      elastic_(std::make_unique<Elastic>(*this)) {
  peer::PeerDataPlane* peer_plane = nullptr;
  if (spec_.local_size < spec_.size) {
    across_ = std::make_unique<AcrossDaemons>(*this);
    cross_ = across_->makeNode();
    if ((limits_.steady_state_rounds || limits_.leader_rounds) && !spec_.elastic)
      rounds_ = across_->makeRounds(*cross_);
    peer_plane = across_->makeDataPlane(*cross_);
  }
  execution_ = std::make_unique<Execution>(*this, pool, peer_plane);
  execution_->start();
}

Job::~Job() {
  stop("job '" + spec_.job_id + "' removed");
  execution_->join();
  if (across_) across_->closeDataPlane();
  cross_.reset();  // before the members its hooks use
}

Status Job::addSession(std::shared_ptr<Session> session) {
  MutexLock lock(mutex_);
  if (!failure_.empty()) return failedPrecondition("job '" + spec_.job_id + "' has failed: " + failure_);
  if (stopping_) return unavailable("job '" + spec_.job_id + "' is stopping");
  if (epochs_.current() > 1) {
    return failedPrecondition("job '" + spec_.job_id + "' is elastic and at epoch " +
                              std::to_string(epochs_.current()) +
                              ": a new rank joins it with GRADSYNC_ELASTIC_JOIN=1 (admitted at its next commit)");
  }
  return ranks_.add(std::move(session));
}

bool Job::everyLocalRankRegistered() const {
  MutexLock lock(mutex_);
  return formation_.localComplete(ranks_.registered().size());
}

void Job::checkFormation(Clock::time_point now) {
  std::string cause;
  {
    MutexLock lock(mutex_);
    if (formation_.formed() || !failure_.empty() || stopping_) return;
    JobFormation::Facts facts;
    facts.registered = ranks_.registered().size();
    facts.elastic_past_first = spec_.elastic && epochs_.current() > 1;
    facts.across_daemons = cross_ != nullptr;
    facts.nodes_joined = cross_ && cross_->formed();
    facts.joins_a_leader = place().joinsALeader();
    const auto never_registered = [&](bool by_rank)
                                      GS_REQUIRES(mutex_) { return ranks_.neverRegistered(spec_.local_size, by_rank); };
    const auto missing = [&](bool) { return cross_->missingRanks(); };
    if (formation_.check(facts, now, never_registered, missing, &cause) != JobFormation::Verdict::kFailed) return;
  }
  failJob(cause, /*node_lost=*/true);
}

namespace {
// "rank 1 (…) left the job (session closed)", and the error it was told
// first, if any: a rank that exits on an error passes its cause on. (Not in
// an elastic job, whose ranks are told of every membership change.)
std::string departure(const Session& session, const std::string& cause, bool elastic) {
  constexpr size_t kMostOfTheError = 400;
  std::string what = session.describe() + " " + cause;
  const std::string error = elastic ? std::string() : session.firstError();
  if (!error.empty()) {
    what += " after it was told: " + error.substr(0, kMostOfTheError) + (error.size() > kMostOfTheError ? "…" : "");
  }
  return what;
}
}  // namespace

bool Job::removeSession(const Session& session, const std::string& cause, bool crashed) {
  RankLoss loss;
  const std::string what = departure(session, cause, spec_.elastic);
  {
    MutexLock lock(mutex_);
    const JobRanks::Left left = ranks_.remove(session);
    // A joiner left before it was admitted: nothing of it is in the job.
    if (left == JobRanks::Left::kReportedJoiner) cross_->reportJoinerGone(session.id());
    if (left != JobRanks::Left::kRank) return ranks_.empty();
    loseRankLocked(session, what, crashed, &loss);
    // A wait for its output grant ends now, with the job's failure when
    // that is this rank's loss.
    const std::string who = session.describe();
    outputs_.sessionLeft(session.id(), failure_.compare(0, who.size(), who) == 0 ? failure_ : who + " left the job");
    if (!failure_.empty()) elastic_->refuseJoinersLocked(*this, failure_, &loss.to_ranks);
    // A follower's joiners wait for the leader's epoch (which admits those
    // reported, or removes the node and so fails them).
    if (ranks_.count() == 0 && !loss.report)
      elastic_->refuseJoinersLocked(*this, "every rank of the job left", &loss.to_ranks);
    loss.empty = ranks_.empty();
    // What the other nodes hear: the job's first failure (a rank leaving a
    // job that failed already is no news, and must not be announced first).
    loss.announced = failure_.empty() ? what : failure_;
    loss.part_gone = loss.empty && cross_ && !spec_.elastic && !failure_.empty() && inFlightLocked() > 0;
  }
  state_cv_.notify_all();
  for (const auto& joiner : loss.replacements) cross_->reportJoiner(joiner->id(), joiner->pid(), joiner->describe());
  if (loss.report) cross_->reportRankLost(loss.report->first, loss.report->second, what);
  if (!loss.cross_failure.empty()) failJob(loss.cross_failure, /*node_lost=*/true);
  // The other nodes first: the local ranks told next may exit at once.
  if (loss.part_gone) {
    failJob(loss.announced, /*node_lost=*/true);
  } else if (cross_ && !loss.epoch_changed) {
    cross_->failedHere("job '" + spec_.job_id + "': " + loss.announced, false);
  }
  flush(&loss.to_ranks);
  return loss.empty;
}

void Job::loseRankLocked(const Session& session, const std::string& what, bool crashed, RankLoss* loss) {
  const bool elastic_loss = spec_.elastic && crashed && failure_.empty() && !stopping_;
  if (elastic_loss && place().elasticRankLostLocked(*this, session, what, loss)) {
    loss->epoch_changed = true;
  } else if (failure_.empty() && !stopping_) {
    failLocked(what);
    // The other nodes hear the cause before the errors for their requests
    // (see failJob).
    if (cross_) cross_->failedHere("job '" + spec_.job_id + "': " + failure_, false);
    failAllLocked(aborted("job '" + spec_.job_id + "': " + failure_), &loss->to_ranks,
                  /*keep_negotiated=*/cross_ != nullptr);
    if (!loss->to_ranks.empty()) {
      GS_LOG(control, warn, "job '{}': {}; failed {} collectives in flight", spec_.job_id, failure_,
             loss->to_ranks.size());
    }
  }
}

void Job::submit(const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue) {
  submission_->submit(session, enqueue);
}

void Job::grant(const Session& session, const v1::OutputGrant& grant) {
  if (!outputs_.deliver(session.rank(), grant.handle(), grant)) {
    GS_LOG(control, debug, "job '{}': unexpected output grant for handle {} from rank {}", spec_.job_id, grant.handle(),
           session.rank());
  }
}

void Job::failRequestLocked(const coordinator::Request& request, const Status& status, RankMessages* to_ranks,
                            bool membership_changed) {
  stats_.failed(status.code(), status.message());
  awaiting_.answered(request.rank, request.handle);
  const std::shared_ptr<Session> session = ranks_.find(request.rank);
  if (!session) {
    place().otherNodesRequestFailedLocked(*this, request, status, membership_changed);
    return;
  }
  session->removeHandle(request.handle);
  to_ranks->emplace_back(session, doneMessage(spec_.job_id, request, status, membership_changed));
}

size_t Job::failAllLocked(const Status& status, RankMessages* to_ranks, bool keep_negotiated, bool membership_changed) {
  const size_t before = to_ranks->size();
  const auto fail = [&](const coordinator::Request& request)
                        GS_REQUIRES(mutex_) { failRequestLocked(request, status, to_ranks, membership_changed); };
  for (const auto& request : negotiation_.takeAll()) fail(request);
  for (const auto& [session, request] : awaiting_.takeEarly()) fail(request);
  if (rounds_) {
    for (const auto& held : rounds_->takeAll()) fail(held.request);
  }
  if (keep_negotiated) return to_ranks->size() - before;
  for (const auto& request : awaiting_.takeForwarded()) fail(request);
  for (const auto& response : queue_.takeAllWaiting()) {
    for (const auto& request : response.requests) {
      if (request) fail(*request);
    }
  }
  return to_ranks->size() - before;
}

void Job::flush(RankMessages* to_ranks) {
  for (auto& [session, message] : *to_ranks) session->send(message);
  to_ranks->clear();
}

void Job::housekeeping(Clock::time_point now) {
  if (cross_) cross_->tick(now);
  checkFormation(now);
  elastic_->housekeeping(now);
  checkStalls(now);
}

void Job::checkStalls(Clock::time_point now) {
  // (Before mutex_: the peer side has its own locks.)
  std::optional<std::vector<v1::NodeInfo>> nodes = across_ ? across_->newMembers() : std::nullopt;
  RankMessages to_ranks;
  {
    MutexLock lock(mutex_);
    const auto here = [&](int rank) GS_REQUIRES(mutex_) {
      const std::shared_ptr<Session> session = ranks_.find(rank);
      return session ? session->describe() : std::string();
    };
    for (const auto& expired : negotiation_.checkStalls(now, limits_.stall_warning, here, std::move(nodes))) {
      for (const auto& request : expired.requests) {
        failRequestLocked(request, deadlineExceeded(expired.what + " (stall deadline passed)"), &to_ranks);
      }
    }
  }
  flush(&to_ranks);
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

void Job::stop(const std::string& reason, bool daemon_stopping) {
  RankMessages to_ranks;
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    // What the peer side learns from now on (streams ending) is this end.
    if (cross_) cross_->jobStopped();
    stop_reason_ = reason;
    outputs_.stopping();
    failAllLocked(unavailable(reason), &to_ranks);
    elastic_->refuseJoinersLocked(*this, reason, &to_ranks);
  }
  execution_->wakeAll();
  state_cv_.notify_all();
  flush(&to_ranks);
  if (cross_) cross_->abortTransfers(reason);  // the executor thread is joined next
  // The other nodes cannot run anything with this daemon gone.
  if (cross_ && daemon_stopping) {
    cross_->failedHere("job '" + spec_.job_id + "' stopped on " + limits_.peer_address + ": " + reason, true);
  }
}

Status Job::addJoiner(std::shared_ptr<Session> session) { return elastic_->addJoiner(std::move(session)); }

void Job::startCrossNodeIfComplete() {
  if (across_) across_->startIfComplete();
}

std::vector<std::shared_ptr<Session>> Job::stoppedRanks(Clock::time_point now) { return elastic_->stoppedRanks(now); }

bool Job::decidesTuningLocked() const { return place().decidesTuningLocked(*this); }

int Job::inFlightLocked() const {
  return static_cast<int>(negotiation_.pendingCount() + awaiting_.forwardedCount() + queue_.inFlight());
}

v1::JobTensors Job::tensors(Clock::time_point now) const {
  v1::JobTensors out;
  out.set_job_id(spec_.job_id);
  MutexLock lock(mutex_);
  negotiation_.describe(now, &out);
  outputs_.describe(now, &out);
  // (A job that failed meanwhile forgot what it had in flight; the one
  // waiting for grants is still there.)
  out.set_in_flight(std::max(inFlightLocked(), out.awaiting_output_size()));
  return out;
}

void Job::describeRanksLocked(v1::JobInfo* info) const {
  int local_rank = 0;  // elastic jobs renumber: this node's ranks in rank order
  for (const auto& [rank, session] : ranks_.byRank()) {
    v1::RankInfo* r = info->add_ranks();
    r->set_rank(rank);
    r->set_local_rank(spec_.elastic ? local_rank++ : session->identity().local_rank);
    r->set_pid(session->pid());
    r->set_hostname(session->identity().hostname);
    r->set_connected(session->streamAttached());
    r->set_joined(negotiation_.joined(rank));
    r->set_arena_bytes(session->arena() ? session->arena()->size() : 0);
    const auto gpu = session->gpu();
    r->set_gpu(gpu ? gpu->device() : -1);
    if (gpu) {
      r->set_gpu_uuid(gpu->deviceUuid());
      r->set_gpu_buffers(gpu->bufferCount());
    }
  }
}

v1::JobInfo Job::info() const {
  MutexLock lock(mutex_);
  v1::JobInfo info;
  info.set_job_id(spec_.job_id);
  info.set_size(negotiation_.size());
  info.set_local_size(spec_.elastic ? ranks_.count() : spec_.local_size);
  describeRanksLocked(&info);
  info.set_tensors_in_flight(inFlightLocked());
  info.set_stall_warnings(negotiation_.stallWarnings());
  stats_.fill(&info);
  tuning_.fill(decidesTuningLocked(), info.mutable_tuning());
  info.set_healthy(failure_.empty() && !stopping_);
  if (spec_.elastic) {
    info.set_elastic(true);
    info.set_min_size(spec_.min_size);
    info.set_epoch(epochs_.current());
    info.set_commits(epochs_.commits());
    for (const auto& change : epochs_.history()) *info.add_history() = change;
  }
  negotiation_.describeProcessSets(&info);
  if (across_) across_->describe(&info);
  return info;
}

}  // namespace gradsync::server
