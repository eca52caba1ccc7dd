// SPDX-License-Identifier: Apache-2.0
// The steady state's rounds through the leader, over the coordination
// streams (RoundExchange; proto RoundMessage): each follower sends the
// leader its PART of a round, one small message whatever its ranks and
// tensors; the leader ANDs them with its own and sends every follower the
// OUTCOME. A round begins when any daemon has work: the leader then says
// BEGIN to the followers, so that those idle join it. Per round, a
// follower sends and receives one message or two, and the leader handles
// one per follower: the job's steady state costs the leader O(N) small
// messages, not O(N x ranks x tensors) requests, and needs no data plane.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "daemon/peer/round_exchange.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class LeaderRounds : public RoundExchange {
 public:
  // Drives the job's data plane while waitForPeers waits, until one of the
  // fds is readable or the time passes; false when there is none to drive
  // (CrossNode::idle): the last bytes of a ring this daemon ran may still
  // be queued for a neighbour.
  using Idle = std::function<bool(const std::vector<int>& wake_fds, transport::Clock::time_point until)>;
  // On the leader, `followers` nodes take part (cross ranks 1..followers)
  // and `send` goes to every follower; on a follower (`followers` 0) it goes
  // to the leader. `send` never waits. `idle` may be null.
  LeaderRounds(bool leader, int followers, std::function<void(const v1::RoundMessage&)> send, Idle idle = nullptr);

  // A RoundMessage read from the node at `cross_rank` (the leader's: 0). A
  // message that breaks the protocol (a round out of turn, a part counted
  // twice, too many bits) aborts the rounds, saying so.
  void deliver(const v1::RoundMessage& message, int cross_rank) GS_EXCLUDES(mutex_);
  // Ends every wait now and from now on (the job failed or stops).
  void abort(const std::string& reason) GS_EXCLUDES(mutex_);

  StatusOr<bool> waitForPeers(int wake_fd, transport::Clock::time_point until) override;
  StatusOr<Outcome> exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                             transport::Clock::time_point deadline) override;
  uint64_t round() const override;
  uint64_t messagesSent() const override;

  static constexpr size_t kWords = kMaxIds / 64;

 private:
  // Leader: the followers' parts of one round so far.
  struct Parts {
    std::vector<bool> seen;  // by cross rank
    int count = 0;
    std::vector<uint64_t> bits = std::vector<uint64_t>(kWords, ~uint64_t{0});  // their AND
  };
  StatusOr<Outcome> lead(std::vector<uint64_t> mine, LeaderPart part, transport::Clock::time_point deadline);
  StatusOr<Outcome> follow(std::vector<uint64_t> mine, transport::Clock::time_point deadline);
  // Whether another daemon has begun the current round.
  bool begunLocked() const GS_REQUIRES(mutex_);
  void failLocked(const std::string& reason) GS_REQUIRES(mutex_);
  void wakeLocked() GS_REQUIRES(mutex_);

  const bool leader_;
  const int followers_;
  const std::function<void(const v1::RoundMessage&)> send_;
  const Idle idle_;
  UniqueFd event_fd_;  // readable once something came for waitForPeers
  mutable Mutex mutex_;
  CondVar cv_;
  uint64_t round_ GS_GUARDED_BY(mutex_) = 1;
  uint64_t messages_sent_ GS_GUARDED_BY(mutex_) = 0;
  std::string aborted_ GS_GUARDED_BY(mutex_);
  std::map<uint64_t, Parts> parts_ GS_GUARDED_BY(mutex_);                // leader: by round
  uint64_t begun_ GS_GUARDED_BY(mutex_) = 0;                             // follower: the last round begun
  std::map<uint64_t, v1::RoundMessage> outcomes_ GS_GUARDED_BY(mutex_);  // follower: by round
};

}  // namespace gradsync::peer
