// SPDX-License-Identifier: Apache-2.0
// A job's cached steady state across daemons (daemon/peer/fast_rounds.h,
// steady_state.h). Local requests that repeat a cached collective are held
// here instead of going to the leader; the executor thread takes part in
// lock-step rounds with the other daemons (a peer::RoundExchange) and runs,
// after the leader's batches a round names, the cached collectives every
// daemon's ranks are ready for.
//
// Two halves under one lock of its own:
// - the requests held (any thread). The Job calls in with its own lock held:
//   this lock is always taken after the Job's, never the other way (a leaf:
//   nothing is called out with it held but the cache lookups);
// - the rounds, on the executor thread (run()). What they need of the job
//   (its batches, its failure) they ask of a Host, without this lock.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/coordinator/request.h"
#include "daemon/peer/hold_limit.h"
#include "daemon/peer/round_exchange.h"
#include "daemon/server/steady_state.h"
#include "proto/gradsync/v1/admin.pb.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::server {

class SteadyRounds {
 public:
  using Clock = std::chrono::steady_clock;
  using Held = SteadyState::Held;

  // The rounds' batches tag their rings apart from the leader's batches.
  static constexpr uint64_t kRoundSequenceBase = uint64_t{1} << 40;

  // What the rounds ask of their job (the executor thread, no lock of the
  // rounds held).
  class Host {
   public:
    virtual ~Host() = default;
    // Before a round: held requests past `hold_limit` go to the leader after
    // all (takeOverdue), and errors the leader sent run. `ended`: the job
    // failed or stops; `led_waiting`: the leader has a batch of its own.
    struct Look {
      bool ended = false;
      bool led_waiting = false;
    };
    virtual Look beforeRound(bool leader, Clock::duration hold_limit) = 0;
    // The leader's part of a round: its next batch (begun, and broadcast
    // to the followers: a broadcast that failed fails the job and the
    // batch), its sequence, and the fusion threshold. A follower's: the
    // threshold alone.
    struct Led {
      std::vector<coordinator::Response> batch;
      peer::RoundExchange::LeaderPart part;
    };
    virtual Led takeLed(bool leader) = 0;
    // Runs a batch that began; batchFinished: the executing batch ended.
    virtual void runBatch(std::vector<coordinator::Response> batch, uint64_t sequence) = 0;
    virtual void batchFinished() = 0;
    // Follower: runs the leader's batches up to `sequence` (waiting for
    // them); false when the job failed or stops.
    virtual bool runLeaderBatchesUpTo(uint64_t sequence) = 0;
    // Runs the cached collectives `ids` that every daemon is ready for
    // (takeRunnable), as batch `sequence`; false when the job failed.
    virtual bool runAgreed(const std::vector<uint64_t>& ids, uint64_t fusion_threshold_bytes, uint64_t sequence) = 0;
    // A round (or the wait for one) ended with `status`: whether the job's
    // own failure or stop ended it (ABORTED), not a broken data plane.
    virtual bool endedByTheJobsFailure(const Status& status) = 0;
    // The rounds broke (a peer or the data plane): the job fails by it.
    virtual void roundsBroke(const Status& status) = 0;
    // The job failed while the other daemons may run collectives a round
    // agreed with this one: every daemon's transfers end with its cause.
    virtual void leaveAgreedCollectives() = 0;
    // The rounds are over: `left`, the requests still held, fail.
    virtual void roundsEnded(std::vector<Held> left) = 0;
  };

  // The response cache the held requests are checked against (the peer
  // side's: the leader negotiated each entry once).
  struct Cache {
    std::function<uint64_t(const coordinator::Request&)> id;  // 0: not cached
    std::function<std::optional<coordinator::Response>(uint64_t)> response;
  };

  SteadyRounds(std::string job_id, Clock::duration transfer_timeout, Cache cache);
  SteadyRounds(const SteadyRounds&) = delete;
  SteadyRounds& operator=(const SteadyRounds&) = delete;

  // The collectives the rounds run: those the response cache keeps that
  // move data (not barriers, joins or process-set changes).
  static bool runsInRounds(CollectiveType type);

  // --- The requests held (any thread).
  enum class Hold {
    kNot,    // not for the rounds (or not now): `request` is untouched
    kHeld,   // held (moved from `request`)
    kReady,  // held, and its collective became ready here: wake the executor
  };
  // Holds `request` of `session`'s rank when the rounds run and it repeats
  // a cached collective of the rounds' kind. A grouped allreduce runs whole
  // or not at all (held until all its members are). `is_local` says which
  // ranks of a cached response are this node's (asked once per cache id).
  Hold hold(const std::shared_ptr<Session>& session, coordinator::Request& request,
            const std::function<bool(int rank)>& is_local) GS_EXCLUDES(mutex_);
  // Every request held for group `group_id` (one of its members goes to
  // the leader, which negotiates a group whole).
  std::vector<Held> takeGroup(uint64_t group_id) GS_EXCLUDES(mutex_);
  // Requests held longer than `hold_limit` (and their groups).
  std::vector<Held> takeOverdue(Clock::duration hold_limit) GS_EXCLUDES(mutex_);
  std::vector<Held> takeAll() GS_EXCLUDES(mutex_);
  // Whether a held collective became ready since the last round.
  bool dirty() const GS_EXCLUDES(mutex_);
  // Of the ids every daemon offered in a round, the responses to run (with
  // this node's requests), released from here.
  std::vector<coordinator::Response> takeRunnable(const std::vector<uint64_t>& ids) GS_EXCLUDES(mutex_);

  // --- The rounds (the executor thread).
  // How this daemon takes part: in `rounds`, with `members` (every node
  // holding one of the job's ranks), as the leader or a follower;
  // `wake_fd` (an eventfd the job writes) wakes its waits; `message_bytes`:
  // of a round's message among the daemons (0 through the leader: varies).
  struct Part {
    peer::RoundExchange* rounds = nullptr;
    std::vector<v1::NodeInfo> members;
    bool leader = false;
    int wake_fd = -1;
    uint64_t message_bytes = 0;
  };
  // Takes part until the job fails or stops.
  void run(Host& host, Part part) GS_EXCLUDES(mutex_);
  // Ends the round under way, and every later one, with `reason` (any
  // thread: the job failed, so no daemon waits in a round for this one).
  void abort(const std::string& reason) GS_EXCLUDES(mutex_);
  // The rounds' counters, for JobInfo.
  void describe(v1::JobInfo* info) const;

 private:
  // Learns whether cached response `id` can take the rounds.
  void learnLocked(uint64_t id, const std::function<bool(int)>& is_local) GS_REQUIRES(mutex_);
  // One round: this daemon's part, then the leader's batches up to the
  // round's sequence and the collectives every daemon is ready for; false
  // when the job ends.
  bool round(Host& host, peer::RoundExchange& rounds, bool leader);
  // The round failed: the leader's batch runs (or fails) all the same, the
  // rounds' failure is the job's, or what the others may run is left.
  void roundFailed(Host& host, const Status& failure, Host::Led led, bool offered);
  // The held collectives ready here (a round's part), clearing dirty().
  std::vector<uint64_t> takeReady() GS_EXCLUDES(mutex_);
  // When the next look is due: in a second, or when the oldest held
  // request reaches the hold limit.
  Clock::time_point wakeBy(Clock::duration hold_limit) const GS_EXCLUDES(mutex_);

  const std::string job_id_;
  const Clock::duration transfer_timeout_;
  const Cache cache_;

  mutable Mutex mutex_;
  bool on_ GS_GUARDED_BY(mutex_) = false;  // the executor thread takes part in the rounds
  SteadyState held_ GS_GUARDED_BY(mutex_);
  std::vector<v1::NodeInfo> members_ GS_GUARDED_BY(mutex_);  // each must hold a rank of a collective
  bool dirty_ GS_GUARDED_BY(mutex_) = false;
  peer::RoundExchange* exchange_ GS_GUARDED_BY(mutex_) = nullptr;  // in run() only

  // How long a held request waits for the rounds, from their recent
  // durations (the executor thread only).
  peer::HoldLimit hold_limit_;
  // Read by describe() from any thread.
  std::atomic<uint64_t> rounds_done_{0};
  std::atomic<uint64_t> messages_{0};
  std::atomic<uint64_t> collectives_{0};  // run after the rounds
  std::atomic<uint64_t> message_bytes_{0};
};

}  // namespace gradsync::server
