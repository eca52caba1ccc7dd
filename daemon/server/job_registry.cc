// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_registry.h"

#include <sys/random.h>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"

namespace gradsync::server {
namespace {

// The job's name, token and size.
Status checkJob(const v1::RegisterRequest& r, uint32_t max_job_size) {
  if (r.job_id().empty() || r.job_id().size() > 128) return invalidArgument("job id must have 1..128 characters");
  for (char c : r.job_id()) {
    if (c < 0x21 || c > 0x7e) return invalidArgument("job id must be printable ASCII without spaces");
  }
  if (r.token().empty() || r.token().size() > 1024) return invalidArgument("job token must have 1..1024 bytes");
  if (r.size() < 1) return invalidArgument("size " + std::to_string(r.size()) + " out of range");
  if (static_cast<uint32_t>(r.size()) > max_job_size) {
    return resourceExhausted("a job of " + std::to_string(r.size()) + " ranks: this daemon serves jobs of at most " +
                             std::to_string(max_job_size) + " (max_job_size)");
  }
  return okStatus();
}

// The rank's place in the job and on this node.
Status checkPlace(const v1::RegisterRequest& r, uint32_t max_local_ranks) {
  if (r.rank() < 0 || r.rank() >= r.size()) {
    return invalidArgument("rank " + std::to_string(r.rank()) + " outside [0, " + std::to_string(r.size()) + ")");
  }
  if (r.local_size() < 1 || static_cast<uint32_t>(r.local_size()) > max_local_ranks) {
    return invalidArgument("local size " + std::to_string(r.local_size()) + " outside [1, " +
                           std::to_string(max_local_ranks) + "]");
  }
  if (r.local_rank() < 0 || r.local_rank() >= r.local_size()) {
    return invalidArgument("local rank " + std::to_string(r.local_rank()) + " outside [0, " +
                           std::to_string(r.local_size()) + ")");
  }
  if (r.local_size() > r.size()) return invalidArgument("local size exceeds size");
  if (r.local_size() < r.size() && r.leader_address().empty()) {
    return invalidArgument("the job spans nodes (local size " + std::to_string(r.local_size()) + " < size " +
                           std::to_string(r.size()) + "): its leader's address is needed (GRADSYNC_LEADER)");
  }
  return okStatus();
}

// The rank's descriptive fields and the job's options.
Status checkOptions(const v1::RegisterRequest& r) {
  if (r.hostname().size() > 256 || r.client_version().size() > 256)
    return invalidArgument("hostname or version too long");
  if (r.elastic()) {
    if (r.min_size() < 1 || r.min_size() > r.size()) {
      return invalidArgument("elastic job: min size " + std::to_string(r.min_size()) + " outside [1, " +
                             std::to_string(r.size()) + "]");
    }
  }
  if (!v1::AutotuneMode_IsValid(r.autotune()))
    return invalidArgument("unknown autotune mode " + std::to_string(r.autotune()));
  if (r.autotune_warmup_samples() > 1000 || r.autotune_steps_per_sample() > 10000 ||
      r.autotune_samples_per_setting() > 100) {
    return invalidArgument(
        "autotune: at most 1000 warm-up samples, 10000 steps per sample and 100 samples per setting");
  }
  return okStatus();
}

Status checkProcessSets(const v1::RegisterRequest& r) {
  if (r.process_sets_size() > 4096) return invalidArgument("more than 4096 process sets");
  for (int i = 0; i < r.process_sets_size(); ++i) {
    const auto& ranks = r.process_sets(i).ranks();
    if (ranks.empty()) return invalidArgument("process set " + std::to_string(i + 1) + " is empty");
    for (int k = 0; k < ranks.size(); ++k) {
      if (ranks[k] < 0 || ranks[k] >= r.size() || (k > 0 && ranks[k] <= ranks[k - 1])) {
        return invalidArgument("process set " + std::to_string(i + 1) +
                               " must list ranks in [0, size) in strictly increasing order");
      }
    }
  }
  return okStatus();
}

Status checkIdentity(const v1::RegisterRequest& r, uint32_t max_local_ranks, uint32_t max_job_size) {
  RETURN_IF_ERROR(checkJob(r, max_job_size));
  RETURN_IF_ERROR(checkPlace(r, max_local_ranks));
  RETURN_IF_ERROR(checkOptions(r));
  return checkProcessSets(r);
}

StatusOr<JobSpec> specOf(const v1::RegisterRequest& r) {
  JobSpec spec;
  spec.job_id = r.job_id();
  spec.token = r.token();
  spec.size = r.size();
  spec.local_size = r.local_size();
  for (const auto& set : r.process_sets()) spec.process_sets.emplace_back(set.ranks().begin(), set.ranks().end());
  spec.leader_address = r.leader_address();
  spec.elastic = r.elastic();
  spec.min_size = r.elastic() ? r.min_size() : 0;
  spec.autotune = {r.autotune(), r.autotune_warmup_samples(), r.autotune_steps_per_sample(),
                   r.autotune_samples_per_setting()};
  if (r.elastic_timeout_seconds() > 0) {
    spec.elastic_timeout = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::min(r.elastic_timeout_seconds(), 86400.0)));
  }
  return spec;
}

Status randomBytes(void* out, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::getrandom(static_cast<uint8_t*>(out) + done, len - done, 0);
    if (n < 0) return internalError("getrandom failed");
    done += static_cast<size_t>(n);
  }
  return okStatus();
}

}  // namespace

JobRegistry::JobRegistry(RegistryLimits limits, executor::ReducePool* pool)
    : limits_(limits), pool_(pool), reaper_([this] { reap(); }) {}

JobRegistry::~JobRegistry() {
  stopAll("daemon shutting down");
  {
    MutexLock lock(reaper_mutex_);
    reaper_stopping_ = true;
  }
  reaper_cv_.notify_all();
  reaper_.join();
}

void JobRegistry::retire(std::shared_ptr<Job> job) {
  if (!job) return;
  {
    MutexLock lock(reaper_mutex_);
    retiring_.push_back(std::move(job));
  }
  reaper_cv_.notify_one();
}

void JobRegistry::reap() {
  MutexLock lock(reaper_mutex_);
  for (;;) {
    reaper_cv_.wait(lock, [&]() GS_REQUIRES(reaper_mutex_) { return reaper_stopping_ || !retiring_.empty(); });
    if (retiring_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Job> job = std::move(retiring_.front());
    retiring_.pop_front();
    lock.unlock();
    job.reset();  // maybe the last reference: the teardown runs here
    lock.lock();
  }
}

Status JobRegistry::checkJobMatches(const Job& job, const v1::RegisterRequest& r) const {
  const JobSpec& spec = job.spec();
  if (!constantTimeEqual(spec.token, r.token())) {
    return unauthenticated("job '" + r.job_id() + "': token does not match the job's token");
  }
  auto mine = specOf(r);
  if (spec.size != r.size() || spec.local_size != r.local_size()) {
    return failedPrecondition("job '" + r.job_id() + "': rank " + std::to_string(r.rank()) + " says size " +
                              std::to_string(r.size()) + "/local size " + std::to_string(r.local_size()) +
                              ", the job has " + std::to_string(spec.size) + "/" + std::to_string(spec.local_size));
  }
  if (mine->leader_address != spec.leader_address) {
    return failedPrecondition("job '" + r.job_id() + "': rank " + std::to_string(r.rank()) + " names leader '" +
                              r.leader_address() + "', the ranks before it '" + spec.leader_address + "'");
  }
  if (mine->elastic != spec.elastic || mine->min_size != spec.min_size) {
    return failedPrecondition("job '" + r.job_id() + "': rank " + std::to_string(r.rank()) +
                              " registers a different elastic mode or minimum size than the ranks before it");
  }
  if (!(mine->autotune == spec.autotune)) {
    return failedPrecondition("job '" + r.job_id() + "': rank " + std::to_string(r.rank()) +
                              " asks for different autotune settings (GRADSYNC_AUTOTUNE*) than the ranks before it");
  }
  if (mine->process_sets != spec.process_sets) {
    return failedPrecondition("job '" + r.job_id() + "': rank " + std::to_string(r.rank()) +
                              " registers different process sets than the ranks before it");
  }
  return okStatus();
}

StatusOr<std::shared_ptr<Session>> JobRegistry::registerRank(const v1::RegisterRequest& request) {
  ASSIGN_OR_RETURN(auto session, addRegistration(request));
  auto job = jobOf(*session);
  if (job) job->startCrossNodeIfComplete();
  return session;
}

std::shared_ptr<Job> JobRegistry::findJob(const std::string& job_id) const {
  MutexLock lock(mutex_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

StatusOr<std::shared_ptr<Session>> JobRegistry::addRegistration(const v1::RegisterRequest& request) {
  RETURN_IF_ERROR(checkIdentity(request, limits_.max_local_ranks, limits_.max_job_size));
  uint64_t id = 0;
  SessionSecret secret{};
  RETURN_IF_ERROR(randomBytes(&id, sizeof(id)));
  RETURN_IF_ERROR(randomBytes(secret.data(), secret.size()));

  MutexLock lock(mutex_);
  while (id == 0 || sessions_.count(id)) ++id;
  auto it = jobs_.find(request.job_id());
  std::shared_ptr<Job> job;
  if (request.elastic_join()) {
    // A new rank for a running elastic job: admitted at its next commit.
    if (it == jobs_.end()) {
      ASSIGN_OR_RETURN(job, joinRunningJob(request));
    } else {
      job = it->second;
      if (!constantTimeEqual(job->spec().token, request.token())) {
        return unauthenticated("job '" + request.job_id() + "': token does not match the job's token");
      }
    }
    RankIdentity identity{request.job_id(), -1, 0, -1, 0, request.hostname(), request.client_version()};
    auto session = std::make_shared<Session>(id, secret, std::move(identity), limits_.job.max_inflight_per_rank);
    RETURN_IF_ERROR(job->addJoiner(session));
    jobs_[request.job_id()] = job;
    sessions_[id] = SessionEntry{session, job, Clock::now()};
    GS_LOG(control, info, "job '{}': a rank registered to join (session {})", request.job_id(), id);
    return session;
  }
  if (it == jobs_.end()) {
    RETURN_IF_ERROR(checkNotEndedEarlyLocked(request));
    RETURN_IF_ERROR(roomForAnotherJobLocked());
    job = std::make_shared<Job>(std::move(specOf(request).value()), limits_.job, pool_);
  } else {
    job = it->second;
    RETURN_IF_ERROR(checkJobMatches(*job, request));
  }
  RankIdentity identity{request.job_id(),     request.rank(),     request.size(),           request.local_rank(),
                        request.local_size(), request.hostname(), request.client_version(), request.autotune_log()};
  auto session = std::make_shared<Session>(id, secret, std::move(identity), limits_.job.max_inflight_per_rank);
  RETURN_IF_ERROR(job->addSession(session));
  jobs_[request.job_id()] = job;
  sessions_[id] = SessionEntry{session, job, Clock::now()};
  GS_LOG(control, info, "job '{}': rank {} registered (session {})", request.job_id(), request.rank(), id);
  return session;
}

Status JobRegistry::roomForAnotherJobLocked() const {
  if (draining_) {
    return unavailable("gradsyncd on " + limits_.job.hostname +
                       " is draining (gradsyncctl drain): it takes no new jobs and exits once its running jobs end");
  }
  if (jobs_.size() < limits_.max_jobs) return okStatus();
  return resourceExhausted("daemon serves " + std::to_string(jobs_.size()) + " jobs already (max_jobs)");
}

StatusOr<std::shared_ptr<Job>> JobRegistry::joinRunningJob(const v1::RegisterRequest& request) {
  // Only a job spanning daemons can take in a node it does not run on.
  if (!request.elastic() || request.leader_address().empty()) {
    return notFound("no job '" + request.job_id() + "' on this daemon to join");
  }
  RETURN_IF_ERROR(roomForAnotherJobLocked());
  ASSIGN_OR_RETURN(JobSpec spec, specOf(request));
  spec.local_size = 0;  // no rank of the job runs here yet
  spec.joins_running = true;
  return std::make_shared<Job>(std::move(spec), limits_.job, pool_);
}

std::shared_ptr<Session> JobRegistry::findSession(uint64_t session_id) const {
  MutexLock lock(mutex_);
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? nullptr : it->second.session;
}

std::shared_ptr<Job> JobRegistry::jobOf(const Session& session) const {
  MutexLock lock(mutex_);
  auto it = sessions_.find(session.id());
  return it == sessions_.end() ? nullptr : it->second.job;
}

void JobRegistry::sessionLost(uint64_t session_id, const std::string& cause, bool crashed) {
  std::shared_ptr<Job> job;
  std::shared_ptr<Session> session;
  {
    MutexLock lock(mutex_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return;
    job = it->second.job;
    session = it->second.session;
    sessions_.erase(it);
  }
  GS_LOG(control, info, "job '{}': {} left: {}", job->spec().job_id, session->describe(), cause);
  const bool early = !job->spec().elastic && !job->everyLocalRankRegistered();
  const bool empty = job->removeSession(*session, cause, crashed);
  if (empty) {
    MutexLock lock(mutex_);
    auto it = jobs_.find(job->spec().job_id);
    if (it != jobs_.end() && it->second == job) {
      jobs_.erase(it);
      if (early) {
        ended_early_[job->spec().job_id] = EndedEarly{
            job->spec().token, session->describe() + " left before every rank of the job had registered: " + cause,
            Clock::now() + limits_.job.join_timeout};
      }
      v1::JobInfo info = job->info();
      if (info.elastic()) {  // its history stays readable (gradsyncctl history)
        info.set_ended(true);
        ended_.push_back(info);
        if (ended_.size() > kEndedJobs) ended_.pop_front();
      }
      GS_LOG(control, info,
             "job '{}' ended: {} operations, {} bytes; coordination {} messages, {} bytes sent, {} "
             "received, {} response-cache hits, largest message {} bytes; {} steady-state rounds, {} messages "
             "sent in them, {} collectives run after them; allreduces among daemons: {} direct, {} recursive doubling, "
             "{} ring, {} halving-doubling; {} stray data-plane messages dropped",
             info.job_id(), info.operations_done(), info.bytes_done(), info.coordination_messages(),
             info.coordination_bytes_sent(), info.coordination_bytes_received(), info.cache_hits(),
             info.largest_coordination_message(), info.steady_rounds(), info.steady_round_messages(),
             info.steady_round_collectives(), info.allreduces_direct(), info.allreduces_doubling(),
             info.allreduces_ring(), info.allreduces_halving(), info.stray_transfers_dropped());
    }
  }
  retire(std::move(job));  // maybe the last reference: torn down on the reaper
}

Status JobRegistry::checkNotEndedEarlyLocked(const v1::RegisterRequest& request) {
  const auto now = Clock::now();
  for (auto it = ended_early_.begin(); it != ended_early_.end();) {
    it = it->second.until <= now ? ended_early_.erase(it) : std::next(it);
  }
  auto it = ended_early_.find(request.job_id());
  if (it == ended_early_.end() || !constantTimeEqual(it->second.token, request.token())) return okStatus();
  return failedPrecondition("job '" + request.job_id() + "' has ended: " + it->second.cause);
}

void JobRegistry::housekeeping(Clock::time_point now) {
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<uint64_t> expired;
  {
    MutexLock lock(mutex_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
    for (const auto& [id, entry] : sessions_) {
      if (entry.session->arena() == nullptr && now - entry.registered > limits_.handoff_timeout) expired.push_back(id);
    }
  }
  for (uint64_t id : expired) sessionLost(id, "did not hand over its arena in time");
  for (auto& job : jobs) {
    job->housekeeping(now);
    for (const auto& session : job->stoppedRanks(now)) {
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(Job::kStoppedRankLimit).count();
      sessionLost(session->id(),
                  "was stopped (SIGSTOP or a debugger) for " + std::to_string(seconds) + " s: treated as lost");
      session->cancel();  // resumed, its calls fail at once
    }
  }
}

void JobRegistry::stopAll(const std::string& reason) {
  std::map<std::string, std::shared_ptr<Job>> jobs;
  {
    MutexLock lock(mutex_);
    jobs = jobs_;
  }
  for (auto& [id, job] : jobs) job->stop(reason, /*daemon_stopping=*/true);
}

std::vector<v1::JobInfo> JobRegistry::jobInfos(const std::string& only_job, bool include_ended) const {
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<v1::JobInfo> infos;
  {
    MutexLock lock(mutex_);
    for (const auto& [id, job] : jobs_) {
      if (only_job.empty() || id == only_job) jobs.push_back(job);
    }
    for (const auto& info : ended_) {
      if (include_ended && (only_job.empty() || info.job_id() == only_job)) infos.push_back(info);
    }
  }
  for (const auto& job : jobs) infos.push_back(job->info());
  return infos;
}

void JobRegistry::setPeerAddress(const std::string& address) {
  MutexLock lock(mutex_);
  limits_.job.peer_address = address;
}

void JobRegistry::setPeerCredentials(std::shared_ptr<grpc::ChannelCredentials> credentials) {
  MutexLock lock(mutex_);
  limits_.job.peer_credentials = std::move(credentials);
}

size_t JobRegistry::jobCount() const {
  MutexLock lock(mutex_);
  return jobs_.size();
}

std::vector<v1::JobTensors> JobRegistry::jobTensors(const std::string& only_job) const {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    MutexLock lock(mutex_);
    for (const auto& [id, job] : jobs_) {
      if (only_job.empty() || id == only_job) jobs.push_back(job);
    }
  }
  std::vector<v1::JobTensors> out;
  for (const auto& job : jobs) out.push_back(job->tensors(Clock::now()));
  return out;
}

size_t JobRegistry::sessionCount() const {
  MutexLock lock(mutex_);
  return sessions_.size();
}

}  // namespace gradsync::server
