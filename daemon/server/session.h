// SPDX-License-Identifier: Apache-2.0
// One connected rank: its identity, its arena (after hand-off) and the
// writing side of its session stream.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/common/budget.h"
#include "daemon/gpu/client_gpu.h"
#include "handoff/ring.h"
#include "handoff/shm_arena.h"
#include "handoff/shm_layout.h"
#include "proto/gradsync/v1/control.grpc.pb.h"

namespace gradsync::server {

using SessionStream = grpc::ServerReaderWriter<v1::DaemonMessage, v1::ClientMessage>;
// What a session's messages are written to: the Session RPC's stream, or a
// test's stand-in for it.
using SessionWriter = grpc::ServerReaderWriterInterface<v1::DaemonMessage, v1::ClientMessage>;
using SessionSecret = std::array<uint8_t, handoff::kSessionSecretBytes>;

struct RankIdentity {
  std::string job_id;
  int rank = -1;
  int size = 0;
  int local_rank = -1;
  int local_size = 0;
  std::string hostname;
  std::string client_version;
  bool autotune_log = false;  // sent each AutotuneSample (RegisterRequest.autotune_log)
};

class Session {
 public:
  // `max_inflight`: the job's max_inflight_per_rank (see kQueuedBesideDones).
  Session(uint64_t id, const SessionSecret& secret, RankIdentity identity, size_t max_inflight = 16384)
      : id_(id),
        secret_(secret),
        identity_(std::move(identity)),
        rank_(identity_.rank),
        max_queued_(max_inflight + kQueuedBesideDones) {}

  uint64_t id() const { return id_; }
  // As registered; an elastic job's epoch changes renumber rank() only.
  const RankIdentity& identity() const { return identity_; }
  int rank() const { return rank_.load(); }
  // Elastic jobs: the rank's number in a new epoch (the job's lock held).
  void renumber(int rank) { rank_.store(rank); }
  // Constant-time comparison with the secret handed out at registration.
  bool secretMatches(const uint8_t* secret, size_t len) const;
  void copySecret(uint8_t* out) const { std::copy(secret_.begin(), secret_.end(), out); }

  // Hand-off: at most once. FAILED_PRECONDITION when already attached.
  // `lease`: the arena's bytes in the daemon's arena budget, returned when
  // the session (and its arena) goes.
  Status attachArena(std::unique_ptr<handoff::ShmArena> arena, Budget::Lease lease, int64_t pid);
  // Null until the hand-off; then stable for the life of the session (the
  // arena stays mapped while anyone holds the session).
  const handoff::ShmArena* arena() const;
  int64_t pid() const;

  // The stream, set by the Session RPC while it runs (false when another
  // stream is attached already). `context` cancels the call (null: the
  // stream has no call to cancel). Messages for it are queued and written by a
  // thread of the session's own, so a client that stops reading blocks only
  // that thread; past max_inflight + kQueuedBesideDones waiting messages its
  // session is cancelled.
  bool attachStream(SessionWriter* stream, grpc::ServerContext* context);
  // Flushes what is queued (cancelling the call if the client does not take
  // it within a second) and stops the writer. Call before the RPC returns.
  void detachStream();
  // Most messages are Dones of operations in flight, which the job's
  // max_inflight_per_rank bounds: a grouped allreduce of more tensors than
  // the completion ring holds (their Dones then take the stream) must not
  // end the session. Beside them: refusals and other messages.
  static constexpr size_t kQueuedBesideDones = 4096;
  bool streamAttached() const;
  // Ends the session stream now (the client's calls fail at once).
  void cancel();
  // The rank's process is stopped (SIGSTOP, a debugger), from /proc.
  bool processStopped() const;
  // Delivers one message: a Done through the arena's completion ring when the
  // client offered rings and it fits, anything else over the stream. False
  // when neither works. Thread-safe (writes are serialised).
  bool send(const v1::DaemonMessage& message);
  // The arena's submission ring, when the client offered rings (else null).
  // Only the session's ring reader consumes it.
  handoff::RingConsumer* submitRing() { return submit_ring_.get(); }
  handoff::RingIndices* submitIndices() const { return control_ ? &control_->submit : nullptr; }

  // "rank 1 (pid 4242, host node-a)", for error messages.
  std::string describe() const;
  // The first failed Done this rank was sent (empty when none): a rank that
  // exits on an error should not hide it behind its own departure.
  std::string firstError() const;

  // CUDA: the rank's GPU state, set once by the hand-off's CudaAttach (null
  // before, and after releaseGpu). Executors hold their own reference while
  // they use it, so a release while work runs unmaps only after that work.
  Status attachGpu(std::shared_ptr<gpu::ClientGpu> gpu);
  std::shared_ptr<gpu::ClientGpu> gpu() const;
  void releaseGpu();

  // Handles of this session's collectives in flight (for duplicate checks).
  bool addHandle(uint64_t handle);
  size_t handlesInFlight() const;
  void removeHandle(uint64_t handle);

 private:
  const uint64_t id_;
  const SessionSecret secret_;
  const RankIdentity identity_;
  std::atomic<int> rank_;
  const size_t max_queued_;  // messages waiting for the writer thread

  mutable Mutex mutex_;
  std::unique_ptr<handoff::ShmArena> arena_;
  Budget::Lease arena_lease_;
  int64_t pid_ GS_GUARDED_BY(mutex_) = 0;
  std::shared_ptr<gpu::ClientGpu> gpu_ GS_GUARDED_BY(mutex_);
  std::set<uint64_t> handles_ GS_GUARDED_BY(mutex_);
  handoff::ArenaControl* control_ = nullptr;  // inside the arena; set once at hand-off
  std::unique_ptr<handoff::RingConsumer> submit_ring_;
  std::unique_ptr<handoff::RingProducer> complete_ring_ GS_GUARDED_BY(write_mutex_);

  void writerLoop();

  mutable Mutex write_mutex_ GS_ACQUIRED_AFTER(mutex_);  // the completion ring and the queue below
  CondVar write_cv_;
  SessionWriter* stream_ = nullptr;  // written by writer_ only
  grpc::ServerContext* context_ = nullptr;
  std::deque<v1::DaemonMessage> queue_ GS_GUARDED_BY(write_mutex_);
  std::string first_error_ GS_GUARDED_BY(write_mutex_);
  bool writer_stop_ GS_GUARDED_BY(write_mutex_) = false;
  bool writer_done_ GS_GUARDED_BY(write_mutex_) = false;
  std::thread writer_;
  std::atomic<bool> stream_attached_{false};
};

}  // namespace gradsync::server
