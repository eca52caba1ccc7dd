// SPDX-License-Identifier: Apache-2.0
// One job served by this daemon: its ranks' sessions, the negotiation, and
// the executor thread that runs ready collectives. Jobs share nothing but the
// reduce pool; one job can only reach the arenas of its own sessions.
//
// The Job holds the state one step of the job changes at once, under its
// lock (ranks, queue of batches, epochs, failure, tuning, formation), and
// the steps that change it together: a rank lost, the job failed or
// stopped. Its parts, each in its own files:
// - Submission (job_submission.h): a request's way into the negotiation,
//   and the ready batch queued or run inline;
// - Execution (job_execution.h): the executors, the batch being run and the
//   executor thread (with its part in the steady-state rounds), and the
//   Dones of a batch's results;
// - Elastic (job_elastic.h): epochs and joiners;
// - AcrossDaemons (job_across_daemons.h): the side that meets the peer side
//   (the CrossNode's hooks, the data plane among the daemons);
// - Place (job_place.h): what differs between one node, the leader and a
//   follower.
// Besides: JobNegotiation, OutputGrants, AwaitingLeader, SteadyRounds and
// JobTimeline, each with a lock of its own taken under the job's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "daemon/autotune/job_tuning.h"
#include "daemon/coordinator/negotiator.h"
#include "daemon/executor/cpu_executor.h"
#include "daemon/executor/gpu_executor.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/gpu_node.h"
#include "daemon/gpu/nccl_library.h"
#include "daemon/metrics/job_stats.h"
#include "daemon/peer/cross_node.h"
#include "daemon/peer/fast_rounds.h"
#include "daemon/peer/hold_limit.h"
#include "daemon/peer/peer_data_plane.h"
#include "daemon/peer/round_exchange.h"
#include "daemon/server/awaiting_leader.h"
#include "daemon/server/batch_queue.h"
#include "daemon/server/batch_runner.h"
#include "daemon/server/enqueue_validation.h"
#include "daemon/server/epoch_log.h"
#include "daemon/server/job_formation.h"
#include "daemon/server/job_negotiation.h"
#include "daemon/server/job_ranks.h"
#include "daemon/server/job_timeline.h"
#include "daemon/server/output_grants.h"
#include "daemon/server/session.h"
#include "daemon/server/steady_rounds.h"
#include "daemon/timeline/timeline.h"
#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::server {

using coordinator::Clock;

struct JobSpec {
  std::string job_id;
  std::string token;
  int size = 0;
  int local_size = 0;
  std::vector<std::vector<int>> process_sets;                   // ids 1..n
  std::string leader_address;                                   // multi-node jobs: rank 0's daemon
  bool elastic = false;                                         // a lost rank starts a new epoch (job_elastic.h)
  int min_size = 0;                                             // elastic: the least size it goes on at
  Clock::duration elastic_timeout = std::chrono::seconds(600);  // elastic: the longest wait below min_size
  // Elastic, across daemons: made for a new rank on a node the running job
  // does not hold yet (local_size 0); the node joins the job as a candidate
  // once that rank registered (job_elastic.h).
  bool joins_running = false;
  // Autotune as the ranks asked (RegisterRequest.autotune; sample sizes 0:
  // the daemon's).
  struct Autotune {
    v1::AutotuneMode mode = v1::AUTOTUNE_DAEMON_DEFAULT;
    uint32_t warmup_samples = 0;
    uint32_t steps_per_sample = 0;
    uint32_t samples_per_setting = 0;
    bool operator==(const Autotune& o) const {
      return mode == o.mode && warmup_samples == o.warmup_samples && steps_per_sample == o.steps_per_sample &&
             samples_per_setting == o.samples_per_setting;
    }
  };
  Autotune autotune;
};

struct JobLimits {
  uint64_t fusion_threshold_bytes = 64 << 20;
  Clock::duration stall_warning = std::chrono::seconds(60);
  Clock::duration stall_deadline = std::chrono::seconds(300);  // zero: never
  // How long a collective waits for its local ranks to give room for its
  // output (the daemon: at most the stall deadline).
  Clock::duration output_grant_timeout = std::chrono::seconds(30);
  uint32_t max_name_length = 256;
  uint32_t max_inflight_per_rank = 16384;  // operations submitted, not yet done
  // Multi-node jobs: this daemon's peer address and host, and how long a
  // follower tries to join its leader.
  std::string peer_address;
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;  // null: plaintext
  std::string hostname;
  std::string topology;  // this node's place in the network (DaemonConfig.topology)
  size_t membership_part_bytes = peer::kMembershipPartBytes;  // DaemonConfig.membership_part_bytes
  Clock::duration join_timeout = std::chrono::seconds(30);
  Clock::duration transfer_timeout = std::chrono::seconds(60);
  transport::UcxOptions data_plane;  // the UCX settings of the data plane
  // Multi-node leader: while other collectives are still being negotiated,
  // ready ones wait up to this long to be fused into one batch (one ring
  // instead of many). Nothing waits when nothing else is pending.
  Clock::duration cycle_time = std::chrono::milliseconds(1);
  // Autotune jobs whose ranks did not say (DaemonConfig.autotune), and the
  // sample sizes of jobs that did not say theirs.
  bool autotune = false;
  autotune::Options autotune_options;
  size_t response_cache_capacity = 4096;
  // The node's GPUs (null without any; `no_gpu_reason` then ends every CUDA
  // tensor with a message saying why).
  gpu::GpuNode* gpus = nullptr;
  std::string no_gpu_reason = "gradsyncd has no GPU";
  // NCCL, when loaded: a multi-node job's leader makes the id of the
  // daemons' communicator with it, and CUDA tensors go between the daemons
  // through it (unless `nccl_between_daemons` is off: host staging then).
  const gpu::NcclLibrary* nccl = nullptr;
  bool nccl_between_daemons = true;
  // Elastic jobs across daemons: a lost leader is replaced by quorum.
  bool leader_failover = false;
  // Other jobs across daemons: cached collectives run after lock-step
  // rounds among the daemons, without the leader's round trip
  // (steady_rounds.h).
  bool steady_state_rounds = true;
  // DaemonConfig.link_cost: how the allreduces among daemons are chosen
  // (peer/peer_data_plane.h).
  std::string link_cost = "auto";
  // Or after rounds through the leader, over the coordination streams,
  // where some node runs no rounds among the daemons
  // (peer/leader_rounds.h).
  bool leader_rounds = true;
};

class Job {
 public:
  Job(JobSpec spec, JobLimits limits, executor::ReducePool* pool);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const JobSpec& spec() const { return spec_; }

  // Adds a registered rank. ALREADY_EXISTS when the rank is taken,
  // FAILED_PRECONDITION when the job has failed.
  Status addSession(std::shared_ptr<Session> session);
  // Elastic jobs: a new rank waiting to be admitted at the next commit
  // barrier (job_elastic.h). FAILED_PRECONDITION for other jobs.
  Status addJoiner(std::shared_ptr<Session> session);
  // The rank's stream or hand-off connection ended: its collectives in flight,
  // and every other rank's, fail naming it (the job is failed from now on);
  // an elastic job whose rank `crashed` (did not leave cleanly) moves to a
  // new epoch with the survivors instead, while at least min_size remain.
  // Returns true when the job has no sessions left. Idempotent.
  bool removeSession(const Session& session, const std::string& cause, bool crashed = true);
  // Handles one Enqueue of `session`; answers errors with a Done at once.
  void submit(const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue);
  // Handles the answer to an OutputRequest.
  void grant(const Session& session, const v1::OutputGrant& grant);
  // Stall warnings and deadlines; called periodically.
  void housekeeping(Clock::time_point now);
  // Elastic jobs: local ranks whose process has been stopped (SIGSTOP, a
  // debugger) for kStoppedRankLimit; the caller removes them as lost (a
  // paused rank would otherwise hold the job until the stall deadline).
  std::vector<std::shared_ptr<Session>> stoppedRanks(Clock::time_point now);
  static constexpr auto kStoppedRankLimit = std::chrono::milliseconds(peer::CrossNode::kSilenceLimitMs);
  // Fails everything in flight with `reason` and stops the executor; with
  // daemon_stopping, tells the job's other nodes that this one is gone.
  void stop(const std::string& reason, bool daemon_stopping = false);
  v1::JobInfo info() const;
  // The collectives in negotiation here, oldest first, and the count in flight.
  v1::JobTensors tensors(Clock::time_point now) const;
  // The multi-node part (null for single-node jobs).
  peer::CrossNode* crossNode() { return cross_.get(); }
  // Multi-node jobs: once every local rank registered, takes up this node's
  // role (leader or follower). Idempotent; call without locks held.
  void startCrossNodeIfComplete();
  // Whether every local rank has registered here (at some point).
  bool everyLocalRankRegistered() const;
  // The job's timeline (JobTimeline): started in place of one that runs,
  // or stopped. `file`: a regular file opened for writing (INVALID_ARGUMENT
  // otherwise).
  Status startTimeline(UniqueFd file, bool mark_cycles) { return timeline_.start(std::move(file), mark_cycles); }
  void stopTimeline() { timeline_.stop(); }

 private:
  // This node's place in the job (job_place.h): one node, the leader or a
  // follower across daemons; the one it has now.
  class Place;
  class OneNode;
  class Leading;
  class Following;
  const Place& place() const;
  // info()'s part for each local rank.
  void describeRanksLocked(v1::JobInfo* info) const GS_REQUIRES(mutex_);
  // Messages to local ranks, gathered under the lock and sent after it
  // (flush).
  using RankMessages = std::vector<std::pair<std::shared_ptr<Session>, v1::DaemonMessage>>;
  using SessionSnapshot = std::map<int, std::shared_ptr<Session>>;
  using Admitted = JobRanks::Admitted;

  // A failure this node's job detected: the other nodes hear of it
  // (CrossNode::failedHere), then the job fails here (its waiting work,
  // and with a lost node what was negotiated, and the transfers). Once; a
  // lost node after a departed rank is news again.
  void failJob(const std::string& cause, bool node_lost) { failJob({cause, node_lost, ""}, /*detected_here=*/true); }
  // The same; `detected_here` false: the peer side's failure
  // (Hooks::on_failure), which the other nodes were told of already: the
  // job fails here and tells no one.
  void failJob(const peer::CrossNode::Failure& failure, bool detected_here);
  // Fails the job once the join timeout passed before it formed (every
  // local rank registered, every node joined), naming who never came.
  void checkFormation(Clock::time_point now);

  // Fails `request` with `status`, queueing its Done in `to_ranks`.
  // `membership_changed`: the Done says the failure is retriable.
  void failRequestLocked(const coordinator::Request& request, const Status& status, RankMessages* to_ranks,
                         bool membership_changed = false) GS_REQUIRES(mutex_);
  // Fails what waits for ranks: pending negotiations (and, unless
  // keep_negotiated, collectives already negotiated but not executed: a
  // multi-node job keeps those when nodes are intact, since other nodes may
  // have completed them already).
  // Returns how many it failed.
  size_t failAllLocked(const Status& status, RankMessages* to_ranks, bool keep_negotiated = false,
                       bool membership_changed = false) GS_REQUIRES(mutex_);
  static void flush(RankMessages* to_ranks);

  const JobSpec spec_;
  const JobLimits limits_;
  mutable Mutex mutex_;
  // The job failed, stopped or changed epoch (ringFailed waits for it).
  CondVar state_cv_;
  // The negotiation, the job's size and process sets, and its stalls (its
  // own lock, a leaf, taken under mutex_; the size and sets read without).
  JobNegotiation negotiation_;
  // The sessions by rank, the ranks that registered here, and joiners.
  JobRanks ranks_ GS_GUARDED_BY(mutex_);
  // The negotiated collectives in the order they run here, one batch at a
  // time: on the executor thread, or inline on the thread whose submission
  // completed it (saves a thread wake-up per collective) when it needs no
  // output grants.
  BatchQueue queue_ GS_GUARDED_BY(mutex_);
  // The output buffers asked of the local ranks, their answers, and the
  // executor's wait for them (its own lock: told of a rank's loss, the
  // job's failure, stop and new epochs).
  OutputGrants outputs_;
  std::string failure_ GS_GUARDED_BY(mutex_);  // non-empty once the job has failed (failLocked)
  // The job fails with `cause` (the output-grant wait hears of it too).
  // Kept without the "job 'j': " a cause from another node starts with:
  // every message built from it names the job once.
  void failLocked(const std::string& cause) GS_REQUIRES(mutex_) {
    const std::string job = "job '" + spec_.job_id + "': ";
    failure_ = cause.rfind(job, 0) == 0 ? cause.substr(job.size()) : cause;
    outputs_.failed(failure_);
    if (rounds_) rounds_->abort(job + failure_);
  }
  bool stopping_ GS_GUARDED_BY(mutex_) = false;
  std::string stop_reason_ GS_GUARDED_BY(mutex_);  // why stop() was called (e.g. the daemon shuts down)
  // Negotiating, ready, forwarded and executing collectives.
  int inFlightLocked() const GS_REQUIRES(mutex_);

  // What the job did (thread-safe itself).
  metrics::JobStats stats_;
  // Fusion threshold and cycle time, maybe autotuned.
  autotune::JobTuning tuning_ GS_GUARDED_BY(mutex_);
  // Whether this daemon decides them: one daemon, or the leader across daemons.
  bool decidesTuningLocked() const GS_REQUIRES(mutex_);

  // The epochs (across daemons, an ending epoch makes what fails meanwhile
  // retriable); a job that is not elastic stays in its first.
  EpochLog epochs_ GS_GUARDED_BY(mutex_);

  // Multi-node state.
  std::unique_ptr<peer::CrossNode> cross_;
  // Whether every local rank registered and every node joined, and the
  // claim of the thread that starts cross_.
  JobFormation formation_ GS_GUARDED_BY(mutex_);
  // The local requests not in this daemon's negotiation: before the
  // node's role is known, and a follower's at the leader.
  AwaitingLeader awaiting_;
  // Its side that meets the peer side, and the data plane among the
  // daemons (job_across_daemons.h; null on one node).
  class AcrossDaemons;
  std::unique_ptr<AcrossDaemons> across_;
  // The cached steady state across daemons (null on one node and in
  // elastic jobs): the requests held for the rounds, which the executor
  // thread takes part in. Its lock is taken after mutex_.
  std::unique_ptr<SteadyRounds> rounds_;
  // What a rank's loss leaves to do once mutex_ is released
  // (removeSession).
  struct RankLoss {
    RankMessages to_ranks;
    bool empty = false;                                  // no rank or joiner is left
    bool epoch_changed = false;                          // elastic: a new epoch, not a failure
    std::string cross_failure;                           // the leader cannot go on
    std::optional<std::pair<int, uint64_t>> report;      // a follower's lost rank (and epoch), for the leader
    std::vector<std::shared_ptr<Session>> replacements;  // its joiners, told to the leader before the loss
    std::string announced;                               // what the other nodes hear
    // The job failed and its last rank here left with negotiated work this
    // node will never run: the other nodes' waits in it must end.
    bool part_gone = false;
  };
  // The job without `session`'s rank (`what`: who and why): a new epoch
  // (elastic; across daemons the leader's), or the job's failure.
  void loseRankLocked(const Session& session, const std::string& what, bool crashed, RankLoss* loss)
      GS_REQUIRES(mutex_);
  // Housekeeping: warns of collectives waiting past the stall warning,
  // naming the missing ranks, and fails those past the stall deadline.
  void checkStalls(Clock::time_point now) GS_EXCLUDES(mutex_);
  JobTimeline timeline_;
  // The three places, stateless (place() picks one).
  const std::unique_ptr<const Place> one_node_;
  const std::unique_ptr<const Place> leading_;
  const std::unique_ptr<const Place> following_;
  // A request's way into the job (job_submission.h).
  class Submission;
  const std::unique_ptr<Submission> submission_;
  // The elastic side: epochs and joiners (job_elastic.h).
  class Elastic;
  const std::unique_ptr<Elastic> elastic_;
  // The executors, the batch being run and the thread that runs them
  // (job_execution.h); built last, its thread joined first.
  class Execution;
  std::unique_ptr<Execution> execution_;
};

}  // namespace gradsync::server
