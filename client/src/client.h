// SPDX-License-Identifier: Apache-2.0
// The client library's engine: one rank's connection to its gradsyncd, its
// arena, and its operations in flight. Errors are Status values; c_api.cc
// turns them into the C ABI's codes.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "client/src/arena.h"
#include "client/src/autotune_log.h"
#include "client/src/cuda/cuda_session.h"
#include "client/src/spin_policy.h"
#include "handoff/ring.h"
#include "proto/gradsync/v1/control.grpc.pb.h"

namespace gradsync::client {

// How long a CUDA operation's GPU work in the daemon may take once its Done
// came, and how long a submission waits for an event slot.
constexpr std::chrono::milliseconds kCudaDoneLimit{60000};

struct ClientOptions {
  std::string socket_path;
  std::string job_id;
  std::string token;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  uint64_t arena_bytes = uint64_t{4} << 30;
  double connect_timeout_seconds = 30;
  std::vector<std::vector<int>> process_sets;
  std::string leader_address;  // multi-node jobs: peer address of rank 0's daemon
  bool elastic = false;        // see RegisterRequest.elastic
  int min_size = 0;            // elastic: 0 means size
  bool elastic_join = false;   // a new rank for a running elastic job (RegisterRequest.elastic_join)
  std::string join_marker;     // elastic_join: a file created once admitted (empty: none)
  // Elastic: how long the job waits below min_size for new ranks (told to
  // the daemon), and how long a joiner waits to be admitted.
  double elastic_timeout_seconds = 600;
  // CUDA operations complete on the caller's stream instead of on the host
  // (see CudaSession::complete and completeOnHost).
  bool cuda_stream_completion = false;
  // How long wait() polls the completion ring, yielding the CPU, before it
  // sleeps on it, while polling pays (SpinPolicy). A sleeping waiter costs
  // the daemon a futex wake and itself the wake-up of a maybe idle CPU.
  std::chrono::microseconds completion_spin{50};
  // Autotune (RegisterRequest.autotune and its sample sizes; 0: the daemon's).
  v1::AutotuneMode autotune = v1::AUTOTUNE_DAEMON_DEFAULT;
  uint32_t autotune_warmup_samples = 0;
  uint32_t autotune_steps_per_sample = 0;
  uint32_t autotune_samples_per_setting = 0;
  // Rank 0 writes autotune's measurements to this file (CSV; empty: none).
  std::string autotune_log_path;
};

// This rank's place in the job; elastic jobs move to new epochs.
struct Membership {
  uint64_t epoch = 0;  // 0: not elastic
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
};

// One collective as the caller describes it (see gradsync_op_t).
struct OpSpec {
  v1::CollectiveType type = v1::ALLREDUCE;
  std::string name;
  v1::DataType dtype = v1::FLOAT32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  v1::ReduceOp op = v1::SUM;
  double prescale = 0;
  double postscale = 0;
  int root_rank = 0;
  int process_set = 0;
  std::vector<int64_t> splits;
  bool cuda = false;       // `data` is CUDA device memory
  void* stream = nullptr;  // CUDA: the stream the tensor is produced and consumed on
  void* output = nullptr;  // CUDA allgather/alltoall/reducescatter: the caller's output
  uint64_t output_bytes = 0;
  uint64_t call = 0;           // gradsync_op_t.call
  std::string abandoned;       // see Client::abandon
  bool commit = false;         // BARRIER: an elastic job's commit (Client::commitBarrier)
  std::vector<int> set_ranks;  // PROCESS_SET_ADD (client_process_sets.cc)
  int target_set = 0;          // PROCESS_SET_REMOVE
};

struct OpResult {
  const void* data = nullptr;
  uint64_t bytes = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;
  int last_joined_rank = -1;
  int process_set_id = 0;  // PROCESS_SET_ADD: the new set's id
};

class Client {
 public:
  // Connects to the daemon, registers, hands over the arena, opens the
  // session. Every step is bounded by options.connect_timeout_seconds.
  static StatusOr<std::unique_ptr<Client>> connect(const ClientOptions& options);
  ~Client();

  const ClientOptions& options() const { return options_; }
  // The current rank and sizes (an elastic job's change after rejoin()).
  Membership membership() const;
  // Elastic jobs: waits (up to timeout_seconds; <= 0: no limit) for the
  // daemon's word on the job's next epoch, if not here yet, and takes up
  // this rank's place in it: later collectives belong to the new epoch,
  // automatic names and process sets start afresh. FAILED_PRECONDITION for
  // a job that is not elastic; the session's error when it ended.
  StatusOr<Membership> rejoin(double timeout_seconds);
  // Whether operation `handle` failed because the job's membership changed
  // (retriable after rejoin()).
  bool membershipChanged(uint64_t handle);
  // Elastic jobs: the barrier of a state commit, where ranks waiting to join
  // are admitted; true when they were (the job moved to a new epoch: rejoin,
  // then send them the state). A plain barrier for other jobs. On failure,
  // *retriable says whether the job's membership changed under it.
  StatusOr<bool> commitBarrier(double timeout_seconds, bool* retriable);
  Arena& arena() { return *arena_; }

  StatusOr<uint64_t> enqueue(const OpSpec& spec);
  StatusOr<std::vector<uint64_t>> enqueueGroup(const std::vector<OpSpec>& specs);
  // Takes part, without data, in the collective `spec` names (its type, name
  // and process set) that this rank failed at the call for `reason`: the
  // other ranks' same collective fails at once naming this rank, instead of
  // waiting for it. The handle completes with that error; release it.
  StatusOr<uint64_t> abandon(const OpSpec& spec, const std::string& reason);
  StatusOr<bool> poll(uint64_t handle);
  // timeout_seconds <= 0: no client-side limit.
  Status wait(uint64_t handle, double timeout_seconds);
  StatusOr<OpResult> result(uint64_t handle);
  Status release(uint64_t handle);
  // Received splits of a completed ALLTOALL, valid until release (null if none).
  const int64_t* receivedSplits(uint64_t handle);
  // Closes the session; operations in flight fail. Idempotent.
  void shutdown();
  // The daemon unmaps every CUDA allocation this rank exported.
  Status releaseCudaExports();
  // The job's timeline (rank 0's call; others return OK doing nothing, as in
  // Horovod): the file is opened here, with this process's permissions, and
  // handed to the daemon, which writes Chrome-trace JSON into it.
  Status startTimeline(const std::string& path, bool mark_cycles);
  Status stopTimeline();

  // Process sets (client_process_sets.cc). Adding and removing are
  // collectives of every rank of the job, called in the same order on each;
  // they return once every rank took part (or `timeout_seconds` passed:
  // DEADLINE_EXCEEDED; <= 0 waits for the daemon, whose stall deadline
  // bounds it). A call this rank's own arguments make invalid (ranks out
  // of range or repeated: INVALID_ARGUMENT; a set of these ranks exists:
  // ALREADY_EXISTS; an unknown or the global set: NOT_FOUND /
  // INVALID_ARGUMENT) still takes part, so the other ranks fail at once
  // naming this rank instead of waiting for it.
  StatusOr<int> addProcessSet(std::vector<int> ranks, double timeout_seconds);
  Status removeProcessSet(int id, double timeout_seconds);
  // The ranks of set `id` (increasing) as this rank knows them; NOT_FOUND
  // for an unknown id.
  StatusOr<std::vector<int>> processSetRanks(int id);

 private:
  struct Operation {
    uint64_t handle = 0;
    std::string name;
    v1::CollectiveType type = v1::ALLREDUCE;
    void* copy_back_to = nullptr;  // user buffer when the input was copied in
    uint64_t input_offset = 0;
    uint64_t length = 0;
    bool owns_input = false;
    std::optional<CudaSession::Prepared> cuda;  // CUDA: its event slot and stream
    void* cuda_output = nullptr;                // CUDA: the caller's output buffer
    std::optional<CudaSession::PreparedOutput> cuda_output_ref;
    bool has_output = false;
    uint64_t output_offset = 0;
    uint64_t output_length = 0;
    bool done = false;
    bool finishing = false;
    bool finished = false;
    Status status;
    std::vector<int64_t> output_shape;
    std::vector<int64_t> received_splits;
    int last_joined_rank = -1;
    int process_set_id = 0;
    bool membership_changed = false;
    bool epoch_changed = false;
  };
  explicit Client(const ClientOptions& options);
  Status registerRank();
  Status handOffArena();
  Status openSession();
  void readerLoop();
  void onDone(const v1::Done& done);
  void applyDoneLocked(const v1::Done& done) GS_REQUIRES(mutex_);
  // Applies the completions in the ring (none while another thread sleeps
  // on it: it will) and wakes the threads waiting on cv_ when any came.
  void drainCompletionsLocked() GS_REQUIRES(mutex_);
  void wakeWaiters();
  void onOutputRequest(const v1::OutputRequest& request);
  void onMembershipChange(const v1::MembershipChange& change);
  void failAllLocked(const Status& status) GS_REQUIRES(mutex_);
  StatusOr<uint64_t> enqueueOne(const OpSpec& spec, uint64_t group_id, uint32_t group_size);
  // Where `op`'s input (op->length bytes) goes: a CUDA tensor's event slot
  // and its output, the arena in place, or a copy in the arena. What it
  // took before a failure is discard()'s to give back.
  Status placeInput(const OpSpec& spec, Operation* op);
  // Gives back what placeInput took for an operation never submitted.
  void discard(Operation& op);
  // The Enqueue for `spec` placed as `op` (handle, name and epoch aside).
  static void describeEnqueue(const OpSpec& spec, const Operation& op, uint64_t group_id, uint32_t group_size,
                              v1::Enqueue* e);
  // Sends an Enqueue (the submission ring, or the session stream); a
  // failure ends its operation.
  void submit(const v1::ClientMessage& message);
  // Copies an in-place result back to the caller's buffer and frees the
  // input slot. Runs without mutex_ (copies can be large).
  void finish(Operation& op);
  // Every CUDA event slot is taken: operations the daemon finished but the
  // caller has not waited for give theirs back (their streams wait for
  // their done events now instead of at wait()); otherwise this waits for
  // the daemon to finish one, at most kCudaDoneLimit.
  Status waitForCudaSlot(const std::string& name);
  Status brokenStatus();
  bool send(const v1::ClientMessage& message);
  // The CUDA side, made on the first CUDA tensor.
  CudaSession& cuda();
  // One request and its response on the hand-off socket; `fds` travel with
  // the request.
  Status exchangeHandoff(const v1::HandoffRequest& request, v1::HandoffResponse* response,
                         const std::vector<int>& fds = {});
  // One hand-off request (with `fd` attached when >= 0); a non-zero response
  // code becomes the error, prefixed with `what`.
  Status handoffCall(const v1::HandoffRequest& request, int fd, const std::string& what);
  // GRADSYNC_TIMELINE / HOROVOD_TIMELINE (and *_MARK_CYCLES) at connect.
  Status startTimelineFromEnvironment();
  // Runs one process set change to its end: enqueued (or abandoned with
  // `invalid`, when non-OK, which is then returned) and waited for; the id
  // the daemon gave an added set.
  StatusOr<int> changeProcessSets(OpSpec spec, const Status& invalid, double timeout_seconds);
  // The end of a blocking call's collective: waits for `handle`, shows the
  // finished operation to `read`, releases it. A handle still in flight at
  // the timeout stays with the client (DEADLINE_EXCEEDED names `what`).
  Status finishBlocking(uint64_t handle, double timeout_seconds, const std::string& what,
                        const std::function<void(const Operation&)>& read);

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Control::Stub> stub_;
  uint64_t session_id_ = 0;
  std::string session_secret_;
  std::unique_ptr<Arena> arena_;
  std::string handoff_path_;
  std::unique_ptr<handoff::RingProducer> submit_ring_ GS_PT_GUARDED_BY(write_mutex_);
  std::unique_ptr<handoff::RingConsumer> complete_ring_;  // pop guarded by mutex_
  UniqueFd handoff_fd_;
  Mutex handoff_mutex_;                   // one hand-off exchange at a time
  std::vector<std::string> daemon_gpus_;  // from Register
  std::once_flag cuda_once_;
  std::unique_ptr<CudaSession> cuda_;
  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::DaemonMessage>> stream_;
  std::unique_ptr<AutotuneLog> autotune_log_;  // rank 0 with GRADSYNC_AUTOTUNE_LOG; written by reader_
  std::thread reader_;

  Mutex write_mutex_;
  mutable Mutex mutex_;
  CondVar cv_;
  std::map<uint64_t, std::unique_ptr<Operation>> ops_ GS_GUARDED_BY(mutex_);
  // A thread sleeps on the completion ring: only it drains the ring (a
  // completion another thread took would not wake it) and it wakes cv_ for
  // the others, which wait there meanwhile.
  bool ring_reader_ GS_GUARDED_BY(mutex_) = false;
  bool session_open_ GS_GUARDED_BY(mutex_) = false;
  bool reader_done_ GS_GUARDED_BY(mutex_) = false;
  Status broken_ GS_GUARDED_BY(mutex_);  // non-OK once the session ended
  uint64_t next_handle_ GS_GUARDED_BY(mutex_) = 1;
  uint64_t next_barrier_ GS_GUARDED_BY(mutex_) = 1;
  uint64_t next_set_change_ GS_GUARDED_BY(mutex_) = 0;
  std::map<int, std::vector<int>> process_sets_ GS_GUARDED_BY(mutex_);  // known sets, 0 included
  Membership membership_ GS_GUARDED_BY(mutex_);                         // current
  std::optional<Membership> next_membership_ GS_GUARDED_BY(mutex_);     // announced, not yet taken up
  std::string join_refused_ GS_GUARDED_BY(mutex_);                      // a joiner's refusal (MembershipChange.refused)
  uint64_t next_commit_ GS_GUARDED_BY(mutex_) = 0;                      // names of commit barriers, per epoch
  SpinPolicy completion_spin_ GS_GUARDED_BY(mutex_){options_.completion_spin};
  std::atomic<bool> shut_down_{false};
};

}  // namespace gradsync::client
