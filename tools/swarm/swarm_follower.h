// SPDX-License-Identifier: Apache-2.0
// One simulated follower daemon of the swarm: a node with one rank that
// joins a real leader, opens its coordination stream (gRPC's callback API:
// the swarm holds a thousand streams on a few threads), sends heartbeats,
// and each step forwards its rank's requests in one message, as a real
// follower's link merges them, and waits for the leader's batches that
// answer them; once the step is cached, it takes part in the rounds through
// the leader instead (leader_rounds.h: a PART of the ids its rank is ready
// for, answered by the OUTCOME), as a follower daemon does. It has no data plane (the
// swarm's tensors are empty), and it keeps of each response only its cache
// id and whether its rank took part: a real follower rebuilds every rank's
// request (CoordinationCodec), which a thousand of them in one process
// could not afford.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/peer/batch_parts.h"
#include "daemon/peer/hold_limit.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::swarm {

struct SwarmJob {
  std::string job_id;
  std::string token;
  int size = 0;                // ranks: the leader's one and the swarm's
  int ranks_per_follower = 1;  // each follower's ranks, numbered in a row
  // Each PART leaves this much later (slow rounds, as on a loaded
  // network); sent by tick, so in steps of its period.
  std::chrono::milliseconds part_delay{0};
};

// A channel from simulated node `node` to `address`: a connection of its
// own, as each follower daemon has.
std::shared_ptr<grpc::Channel> nodeChannel(const std::string& address, int node);

// What the followers tell the swarm.
struct FollowerEvents {
  std::function<void()> step_done;                       // every request of the step was answered
  std::function<void(const std::string& cause)> failed;  // the leader failed the job or the stream ended early
};

class SwarmFollower : public grpc::ClientBidiReactor<v1::FollowerMessage, v1::LeaderMessage> {
 public:
  // The follower of ranks [rank, rank + job.ranks_per_follower).
  SwarmFollower(const SwarmJob& job, int rank, FollowerEvents* events);

  int rank() const { return rank_; }                       // its first
  const std::string& address() const { return address_; }  // its name among the job's nodes
  // Whether `rank` is one of its ranks.
  bool holds(int rank) const { return rank >= rank_ && rank < rank_ + job_.ranks_per_follower; }
  v1::JoinJobRequest joinRequest() const;
  // Opens the coordination stream as node `cross_rank` over `stub`; cached
  // steps go by rounds through the leader when the job runs them (every
  // node offered them), else as requests by cache id.
  void open(v1::Peer::Stub* stub, int cross_rank, bool rounds);
  // Forwards its ranks' requests for `tensors` empty allreduces.
  void submitStep(int tensors);
  void heartbeat(int64_t now_ms);
  // Sends a delayed PART that is due. Between rounds, ids held for the
  // rounds past the hold limit go to the leader as requests by cache id,
  // as a follower daemon's do (peer::HoldLimit): the leader's own rank may
  // have sent its requests there, and then no round runs them.
  void tick();
  // Closes its side (the rank finished); the stream then ends.
  void close();
  // Waits (up to `timeout`) for the stream's end.
  bool waitDone(std::chrono::milliseconds timeout);

  struct Traffic {
    uint64_t bytes_received = 0;
    uint64_t bytes_sent = 0;
    uint64_t largest_received = 0;
  };
  Traffic traffic() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void send(v1::FollowerMessage message) GS_EXCLUDES(mutex_);
  void onMessage(const v1::LeaderMessage& message);
  void onBatch(const v1::Batch& batch);
  void onRound(const v1::RoundMessage& message);
  // The PART of the current round, its ready ids (mutex_ held by the caller:
  // it must go out before a later round's).
  v1::FollowerMessage partLocked() GS_REQUIRES(mutex_);
  // Requests queued; the caller writes the first if it returns it.
  const v1::FollowerMessage* queueLocked(v1::FollowerMessage message) GS_REQUIRES(mutex_);
  // The PART of the current round out now, or held for part_delay (tick
  // sends it); the caller writes the message if this returns it.
  const v1::FollowerMessage* partOutLocked() GS_REQUIRES(mutex_);
  // Ids held past the hold limit go to the leader (see tick); the
  // caller writes the message if this returns it.
  const v1::FollowerMessage* fallBackLocked() GS_REQUIRES(mutex_);
  // One message asking for `ids` by cache id.
  v1::FollowerMessage requestsByIdLocked(const std::vector<uint64_t>& ids) GS_REQUIRES(mutex_);

  const SwarmJob job_;
  const int rank_;
  FollowerEvents* const events_;
  const std::string address_;  // its name among the job's nodes (nobody connects to it)
  grpc::ClientContext context_;
  // What the leader's responses taught: the cache id of each tensor, and
  // whether this rank takes part in each cached response.
  std::unordered_map<std::string, uint64_t> id_of_name_ GS_GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, bool> mine_by_id_ GS_GUARDED_BY(mutex_);
  // The rounds: the current one, whether its PART went out, and the ids of
  // this step not run yet.
  bool rounds_ = false;  // set before the stream opens
  uint64_t round_ GS_GUARDED_BY(mutex_) = 1;
  bool in_round_ GS_GUARDED_BY(mutex_) = false;
  std::vector<uint64_t> ready_ GS_GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point held_since_ GS_GUARDED_BY(mutex_);  // of ready_
  std::chrono::steady_clock::time_point part_sent_ GS_GUARDED_BY(mutex_);
  peer::HoldLimit hold_ GS_GUARDED_BY(mutex_);  // a follower daemon's rule, from its rounds' durations
  std::optional<v1::FollowerMessage> delayed_part_ GS_GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point part_due_ GS_GUARDED_BY(mutex_);
  peer::BatchAssembler parts_;  // the reader's
  v1::LeaderMessage incoming_;
  std::atomic<int> waiting_{0};  // requests of the step not answered yet
  uint64_t handle_ = 0;

  mutable Mutex mutex_;
  CondVar done_cv_;
  std::deque<v1::FollowerMessage> outgoing_ GS_GUARDED_BY(mutex_);  // front: being written
  bool closing_ GS_GUARDED_BY(mutex_) = false;
  bool done_ GS_GUARDED_BY(mutex_) = false;
  Traffic traffic_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::swarm
