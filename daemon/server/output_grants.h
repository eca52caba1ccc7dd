// SPDX-License-Identifier: Apache-2.0
// The output buffers one job's local ranks grant: a collective whose output
// size only the daemon knows (allgather, alltoall, reducescatter) asks each
// rank for room in its arena, and runs once every rank answered. This holds
// the grants asked for and the answers, and the executor's wait for them
// (one at a time; shown to gradsyncctl), which ends at once when a rank it
// waits for leaves, the job stops or moves to another epoch, or (where the
// wait asks for it) the job fails: the job tells it so. It also checks an
// answer before the executor writes to it. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "handoff/shm_arena.h"
#include "proto/gradsync/v1/admin.pb.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

class OutputGrants {
 public:
  using Clock = std::chrono::steady_clock;
  // One rank asked for its output: the rank, the collective's handle, and
  // the id of the session that holds the rank.
  struct Ask {
    int rank = -1;
    uint64_t handle = 0;
    uint64_t session = 0;
  };

  // The executor asks for `asks` of `tensor` in `epoch` (before the
  // requests go out: the wait shows from then on); the error await() would
  // end with at once, if any (then nothing is asked).
  Status begin(const std::string& tensor, const std::vector<Ask>& asks, uint64_t epoch, bool ends_at_failure,
               Clock::time_point now) GS_EXCLUDES(mutex_);
  // A rank's answer; false when none was asked for (late: the wait ended,
  // or a new epoch forgot it).
  bool deliver(int rank, uint64_t handle, const v1::OutputGrant& grant) GS_EXCLUDES(mutex_);
  // Waits for every answer to the asks begun, in their order, for at most
  // `timeout`, and ends the wait. Each error starts with `prefix`: the job
  // stopped (UNAVAILABLE), failed (only when `ends_at_failure`), moved past
  // `epoch`, a session asked left (ABORTED), or a rank did not answer in
  // time (DEADLINE_EXCEEDED, naming the ranks).
  StatusOr<std::vector<v1::OutputGrant>> await(const std::vector<Ask>& asks, uint64_t epoch, bool ends_at_failure,
                                               Clock::duration timeout, const std::string& prefix) GS_EXCLUDES(mutex_);

  // What ends a wait. `cause` says who left and why ("rank 1 (pid 42,
  // host a) disconnected"), `failure` why the job failed.
  void sessionLeft(uint64_t session, const std::string& cause) GS_EXCLUDES(mutex_);
  void failed(const std::string& failure) GS_EXCLUDES(mutex_);
  void stopping() GS_EXCLUDES(mutex_);
  // A new epoch: every grant asked for belongs to the old one.
  void newEpoch(uint64_t epoch) GS_EXCLUDES(mutex_);

  // The wait in progress (gradsyncctl tensors): none, or one.
  void describe(Clock::time_point now, v1::JobTensors* out) const GS_EXCLUDES(mutex_);

  // Where a rank's answer `grant` to a request of `expected` bytes lets the
  // executor write in `arena` (`who`: the rank, for errors): the grant's
  // own error, a length other than asked, or a range outside the arena are
  // refused.
  static StatusOr<uint8_t*> pointer(const std::string& who, const handoff::ShmArena* arena,
                                    const v1::OutputGrant& grant, uint64_t expected);

 private:
  using Key = std::pair<int, uint64_t>;  // (rank, handle)
  // Why the wait for `asks` ends now (OK: it does not).
  Status endedLocked(const std::vector<Ask>& asks, uint64_t epoch, bool ends_at_failure) const GS_REQUIRES(mutex_);

  mutable Mutex mutex_;
  CondVar cv_;
  std::set<Key> expected_ GS_GUARDED_BY(mutex_);
  std::map<Key, v1::OutputGrant> granted_ GS_GUARDED_BY(mutex_);
  struct Wait {
    std::string tensor;
    Clock::time_point since;
    std::vector<Key> keys;
  };
  std::optional<Wait> wait_ GS_GUARDED_BY(mutex_);
  uint64_t epoch_ GS_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, std::string> left_ GS_GUARDED_BY(mutex_);  // sessions of this epoch that left, and why
  std::string failure_ GS_GUARDED_BY(mutex_);
  bool stopping_ GS_GUARDED_BY(mutex_) = false;
};

}  // namespace gradsync::server
