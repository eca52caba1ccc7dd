// SPDX-License-Identifier: Apache-2.0
// The daemon's jobs and sessions. Registration creates a job on its first
// rank and the job goes away with its last session. A job whose ranks all
// left before every one of them had registered is remembered for the join
// timeout: its later ranks are refused at registration, naming who left,
// instead of forming the job anew and waiting for the ranks that left.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/executor/reduce_pool.h"
#include "daemon/server/job.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

struct RegistryLimits {
  JobLimits job;
  uint32_t max_jobs = 64;
  uint32_t max_local_ranks = 256;
  uint32_t max_job_size = 65536;  // ranks of a job, all nodes
  // A registered session whose hand-off has not arrived by then is dropped.
  Clock::duration handoff_timeout = std::chrono::seconds(30);
};

class JobRegistry {
 public:
  JobRegistry(RegistryLimits limits, executor::ReducePool* pool);
  ~JobRegistry();
  // Drops a reference to `job` on the registry's own thread: when it is the
  // last, the job's teardown (its executor joined, its data plane's goodbye,
  // up to a second or two) blocks neither a gRPC handler (the leader's
  // stream from a follower ends only once its handler returns) nor a
  // session's thread.
  void retire(std::shared_ptr<Job> job);

  // Validates the identity, finds or creates the job, checks token, size and
  // process sets, and creates the rank's session.
  StatusOr<std::shared_ptr<Session>> registerRank(const v1::RegisterRequest& request);
  // The session with this id, or null.
  std::shared_ptr<Session> findSession(uint64_t session_id) const;
  std::shared_ptr<Job> jobOf(const Session& session) const;
  // The job with this id, or null.
  std::shared_ptr<Job> findJob(const std::string& job_id) const;
  // The session's stream or hand-off connection ended; removes it (and its
  // job when empty). Idempotent.
  // `crashed`: the rank did not leave cleanly (an elastic job goes on
  // without it; a clean leave ends the job as usual).
  void sessionLost(uint64_t session_id, const std::string& cause, bool crashed = true);
  // Stall checks and hand-off timeouts.
  void housekeeping(Clock::time_point now);
  // Fails every job with `reason` (daemon shutdown).
  void stopAll(const std::string& reason);

  // The jobs (only `only_job` when non-empty); with `include_ended`, also
  // the last kEndedJobs elastic jobs that ended, for their history.
  std::vector<v1::JobInfo> jobInfos(const std::string& only_job, bool include_ended = false) const;
  static constexpr size_t kEndedJobs = 16;
  // The peer service's bound address, known once it listens (before any
  // job registers).
  void setPeerAddress(const std::string& address);
  // Credentials for calls to other daemons (TLS when configured).
  void setPeerCredentials(std::shared_ptr<grpc::ChannelCredentials> credentials);
  size_t jobCount() const;
  // Draining: new jobs are refused (UNAVAILABLE); running ones go on.
  void setDraining(bool draining) { draining_ = draining; }
  bool draining() const { return draining_; }
  // Per job (only `only_job` when non-empty): collectives in negotiation.
  std::vector<v1::JobTensors> jobTensors(const std::string& only_job) const;
  // Sessions (ranks registered on this daemon), every job together.
  size_t sessionCount() const;

 private:
  // A job that ended before every local rank had registered.
  struct EndedEarly {
    std::string token;
    std::string cause;
    Clock::time_point until;
  };
  // Refuses a rank of a job that ended early (FAILED_PRECONDITION naming
  // who left); forgets the entries past their time.
  Status checkNotEndedEarlyLocked(const v1::RegisterRequest& request) GS_REQUIRES(mutex_);

  struct SessionEntry {
    std::shared_ptr<Session> session;
    std::shared_ptr<Job> job;
    Clock::time_point registered;
  };
  Status checkJobMatches(const Job& job, const v1::RegisterRequest& request) const;
  // Checks and records a registration (takes mutex_).
  StatusOr<std::shared_ptr<Session>> addRegistration(const v1::RegisterRequest& request) GS_EXCLUDES(mutex_);
  // A joiner for an elastic job spanning daemons that runs nothing here
  // yet: the job, made for it (this node joins as a candidate).
  StatusOr<std::shared_ptr<Job>> joinRunningJob(const v1::RegisterRequest& request) GS_REQUIRES(mutex_);
  Status roomForAnotherJobLocked() const GS_REQUIRES(mutex_);  // max_jobs

  RegistryLimits limits_;  // peer_address set once at start
  std::atomic<bool> draining_{false};
  executor::ReducePool* pool_;
  mutable Mutex mutex_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ GS_GUARDED_BY(mutex_);
  std::map<std::string, EndedEarly> ended_early_ GS_GUARDED_BY(mutex_);
  std::map<uint64_t, SessionEntry> sessions_ GS_GUARDED_BY(mutex_);
  std::deque<v1::JobInfo> ended_ GS_GUARDED_BY(mutex_);  // the last elastic jobs that ended, oldest first

  // retire(): references dropped by reaper_ (under reaper_mutex_).
  void reap();
  Mutex reaper_mutex_;
  CondVar reaper_cv_;
  std::deque<std::shared_ptr<Job>> retiring_ GS_GUARDED_BY(reaper_mutex_);
  bool reaper_stopping_ GS_GUARDED_BY(reaper_mutex_) = false;
  std::thread reaper_;
};

}  // namespace gradsync::server
