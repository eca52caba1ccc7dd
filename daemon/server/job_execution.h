// SPDX-License-Identifier: Apache-2.0
// The executing side of a job, for Job's files only: the executors and the
// BatchRunner, the batch being run and the thread that takes ready batches
// (leading them to the followers across daemons, or taking part in the
// steady-state rounds: SteadyRounds::Host), and what becomes of a batch's
// results (Dones, tuning, counters).
//
// It owns what only the running of batches uses; the job's state (its
// queue of batches, ranks, epochs, failure) it reads and changes under the
// job's lock, as the job's other parts do. Its Locked steps name the job
// whose lock they need (a step of the job's calls them with it held).
#pragma once

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "daemon/server/job.h"

namespace gradsync::server {

class Job::Execution final : private SteadyRounds::Host {
 public:
  // Runs `job`'s batches with `pool`; over `peer_plane` across daemons (null:
  // one node).
  Execution(Job& job, executor::ReducePool* pool, peer::PeerDataPlane* peer_plane);
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  // The thread that runs the ready batches; join() once the job stops.
  void start();
  void join();
  // Wakes the thread (its condition and, where it drives the data plane or
  // takes part in the rounds, its fd): a change may have made a batch
  // runnable, or the job stops. Any thread.
  void wake();
  void wakeAll();
  // The batch `job`'s queue began runs with the sessions, epoch, local ranks
  // and fusion threshold of now: `fusion_threshold_bytes`, the leader's, or
  // 0 for this daemon's.
  void beginBatchLocked(Job& job, uint64_t fusion_threshold_bytes = 0) GS_REQUIRES(job.mutex_);
  // Runs `batch` (begun) as the batch context says (`sequence`: the
  // leader's number, 0 for none), on the calling thread.
  void runBatch(std::vector<coordinator::Response> batch, uint64_t sequence) override;
  // The epoch the batch running (on the calling thread) began in.
  uint64_t batchEpoch() const { return batch_.epoch; }
  // A phase of the data plane's, for the statistics and the timeline.
  void phase(const char* name, bool begin) { runner_->phase(name, begin); }

 private:
  void loop();
  // Writes wake_fd_ (where the thread drives the data plane or the rounds).
  void signalWakeFd();
  // The thread's next batch (queue_.next), begun; nullopt once the job
  // stops. Waits at most one cycle for more to fuse.
  std::optional<BatchQueue::Batch> nextBatchLocked(MutexLock& lock) GS_REQUIRES(job_.mutex_);
  // Across daemons: drives the data plane until a batch is runnable or the
  // job stops (at once on one node).
  void driveUntilRunnable() GS_EXCLUDES(job_.mutex_);
  // The leader's batch to the followers, before it runs here: a broadcast
  // that failed fails the batch here and the job.
  void lead(std::vector<coordinator::Response>& batch, uint64_t sequence);
  // The cached steady state across daemons: the thread takes part in the
  // rounds (SteadyRounds::run) until the job fails or stops (or returns at
  // once when a daemon does not offer them); the rest is what the rounds
  // ask of the job (SteadyRounds::Host).
  void takePartInRounds();
  Look beforeRound(bool leader, Clock::duration hold_limit) override GS_EXCLUDES(job_.mutex_);
  Led takeLed(bool leader) override GS_EXCLUDES(job_.mutex_);
  void batchFinished() override GS_EXCLUDES(job_.mutex_);
  bool runLeaderBatchesUpTo(uint64_t sequence) override GS_EXCLUDES(job_.mutex_);
  bool runAgreed(const std::vector<uint64_t>& ids, uint64_t fusion_threshold_bytes, uint64_t sequence) override
      GS_EXCLUDES(job_.mutex_);
  bool endedByTheJobsFailure(const Status& status) override GS_EXCLUDES(job_.mutex_);
  void roundsBroke(const Status& status) override GS_EXCLUDES(job_.mutex_);
  // The job failed while the other daemons may run collectives a round
  // agreed with this one, which will not run them (its held requests were
  // failed): every daemon's transfers end with the job's cause, instead of
  // waiting for this daemon's part until the transfer timeout.
  void leaveAgreedCollectives() override GS_EXCLUDES(job_.mutex_);
  void roundsEnded(std::vector<SteadyRounds::Held> left) override GS_EXCLUDES(job_.mutex_);
  // A fused response of the batch ran (the runner's hook): its Dones,
  // tuning and counters.
  void fusedCompleted(const fusion::FusedResponse& fused, const std::vector<executor::ResponseResult>& results,
                      Clock::time_point started) GS_EXCLUDES(job_.mutex_);
  // `started`: when the response's fused batch began executing.
  void completeLocked(const coordinator::Response& response, const executor::ResponseResult& result,
                      Clock::time_point started, RankMessages* to_ranks) GS_REQUIRES(job_.mutex_);
  // What autotune measured or decided, to the local ranks that asked
  // (RegisterRequest.autotune_log).
  void tellTuningLocked(const std::vector<autotune::TuningEvent>& events, RankMessages* to_ranks)
      GS_REQUIRES(job_.mutex_);

  Job& job_;
  std::unique_ptr<executor::GpuExecutor> gpu_executor_;  // null without GPUs
  executor::CpuExecutor executor_;
  executor::SingleNodeDataPlane single_node_;
  // Runs the batches: the executors' view of the job (RankAccess).
  std::unique_ptr<BatchRunner> runner_;
  // The job as the batch being executed began: its sessions, epoch, fusion
  // threshold (this daemon's, or the leader's that came with the batch) and
  // this node's ranks. Written under the job's lock by the thread that
  // begins a batch (queue_.next: one at a time), read by it as it runs it.
  BatchContext batch_;
  CondVar ready_cv_;  // waited on with the job's lock
  UniqueFd wake_fd_;  // eventfd (across daemons): wakes the thread where it drives the data plane
  std::thread thread_;
};

}  // namespace gradsync::server
