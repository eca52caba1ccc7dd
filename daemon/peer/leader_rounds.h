// SPDX-License-Identifier: Apache-2.0
// The steady state's rounds through the leader, over the coordination
// streams (RoundExchange; proto RoundMessage): each follower sends the
// leader its PART of a round, one small message whatever its ranks and
// tensors; the leader ANDs them with its own and sends every follower the
// OUTCOME. A round begins when any daemon has work; the leader says BEGIN
// to the followers whose part it still lacks, so that those idle join it:
// at once when the leader has a batch of its own for the round to order,
// or to a follower whose last part asked for ids its round did not run
// (it holds them still, and waits for a round); to the others only after
// `begin_grace`, since an idle follower's empty part only makes the round
// run nothing (while ranks drift apart, most of a step's followers send
// their parts on their own within it). Per round, a follower sends and
// receives one message or two, and the leader handles one or two per
// follower: the job's steady state costs the leader O(N) small messages,
// not O(N x ranks x tensors) requests, and needs no data plane.
#pragma once

#include <chrono>
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

// What the leader's and the followers' sides share: the rounds' count,
// their end (abort), and the wait for another daemon to begin one.
class LeaderRounds : public RoundExchange {
 public:
  // Drives the job's data plane while waitForPeers waits, until one of the
  // fds is readable or the time passes; false when there is none to drive
  // (CrossNode::idle): the last bytes of a ring this daemon ran may still
  // be queued for a neighbour.
  using Idle = std::function<bool(const std::vector<int>& wake_fds, transport::Clock::time_point until)>;
  // Sends a message, never waiting: on the leader to the followers at the
  // cross ranks `to` (nullptr: every follower), on a follower to the
  // leader.
  using Send = std::function<void(const v1::RoundMessage&, const std::vector<int>* to)>;
  static constexpr std::chrono::milliseconds kBeginGrace{100};
  static constexpr size_t kWords = kMaxIds / 64;

  // A RoundMessage read from the node at `cross_rank` (the leader's: 0). A
  // message that breaks the protocol (a round out of turn, a part counted
  // twice, too many bits) aborts the rounds, saying so.
  void deliver(const v1::RoundMessage& message, int cross_rank) GS_EXCLUDES(mutex_);
  // Ends every wait now and from now on (the job failed or stops).
  void abort(const std::string& reason) override GS_EXCLUDES(mutex_);

  StatusOr<bool> waitForPeers(int wake_fd, transport::Clock::time_point until) override;
  uint64_t round() const override;
  uint64_t messagesSent() const override;

 protected:
  // `idle` may be null.
  LeaderRounds(Send send, Idle idle);
  // deliver's part of this side (`where` names the round for errors):
  // false when the message changes nothing a waiter looks at, or broke the
  // protocol (failLocked).
  virtual bool deliverLocked(const v1::RoundMessage& message, int cross_rank, const std::string& where)
      GS_REQUIRES(mutex_) = 0;
  // Whether another daemon has begun the current round.
  virtual bool begunLocked() const GS_REQUIRES(mutex_) = 0;
  void failLocked(const std::string& reason) GS_REQUIRES(mutex_);
  void wakeLocked() GS_REQUIRES(mutex_);

  const Send send_;
  const Idle idle_;
  UniqueFd event_fd_;  // readable once something came for waitForPeers
  mutable Mutex mutex_;
  CondVar cv_;
  uint64_t round_ GS_GUARDED_BY(mutex_) = 1;
  uint64_t messages_sent_ GS_GUARDED_BY(mutex_) = 0;
  std::string aborted_ GS_GUARDED_BY(mutex_);
};

// The leader's side: its followers' parts gathered, BEGIN to those that
// should join, the OUTCOME to every follower.
class LeadingRounds final : public LeaderRounds {
 public:
  // `followers` nodes take part (cross ranks 1..followers).
  LeadingRounds(int followers, Send send, Idle idle = nullptr, std::chrono::milliseconds begin_grace = kBeginGrace);

  StatusOr<Outcome> exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                             transport::Clock::time_point deadline) override;

 private:
  // The followers' parts of one round so far.
  struct Parts {
    std::vector<bool> seen;                 // by cross rank
    std::vector<std::vector<uint64_t>> of;  // by cross rank: its bits, no trailing zero words
    int count = 0;
    std::vector<uint64_t> bits = std::vector<uint64_t>(kWords, ~uint64_t{0});  // their AND
  };
  Parts& partsLocked(uint64_t round) GS_REQUIRES(mutex_);
  // BEGIN of `round` to the followers `to` (nullptr: all).
  void begin(uint64_t round, const std::vector<int>* to) GS_EXCLUDES(mutex_);
  // exchange's parts: the error naming the followers whose part of `round`
  // never came (the first 8); the OUTCOME of `round` (`bits`: the ids
  // every daemon is ready for) to every follower.
  Status missingPartsLocked(uint64_t round) GS_REQUIRES(mutex_);
  // Every part of `round` came: `mine` becomes the ids every daemon is
  // ready for, each follower's holding_ is set, and the next round is due.
  void closeRoundLocked(uint64_t round, LeaderPart part, std::vector<uint64_t>* mine) GS_REQUIRES(mutex_);
  void sendOutcome(uint64_t round, std::vector<uint64_t> bits, LeaderPart part) GS_EXCLUDES(mutex_);
  // A follower's PART (at most one round ahead, once each).
  bool deliverLocked(const v1::RoundMessage& message, int cross_rank, const std::string& where) override
      GS_REQUIRES(mutex_);
  bool begunLocked() const override GS_REQUIRES(mutex_);

  const int followers_;
  const std::chrono::milliseconds begin_grace_;
  std::map<uint64_t, Parts> parts_ GS_GUARDED_BY(mutex_);  // by round
  // By cross rank, whether the follower's last part asked for ids its
  // round did not run; and the batch sequence the last outcome carried.
  std::vector<bool> holding_ GS_GUARDED_BY(mutex_);
  uint64_t announced_sequence_ GS_GUARDED_BY(mutex_) = 0;
};

// A follower's side: its PART to the leader, the leader's OUTCOME awaited.
class FollowingRounds final : public LeaderRounds {
 public:
  explicit FollowingRounds(Send send, Idle idle = nullptr) : LeaderRounds(std::move(send), std::move(idle)) {}

  StatusOr<Outcome> exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                             transport::Clock::time_point deadline) override;

 private:
  // The leader's BEGIN or OUTCOME.
  bool deliverLocked(const v1::RoundMessage& message, int cross_rank, const std::string& where) override
      GS_REQUIRES(mutex_);
  bool begunLocked() const override GS_REQUIRES(mutex_);

  uint64_t begun_ GS_GUARDED_BY(mutex_) = 0;                             // the last round begun
  std::map<uint64_t, v1::RoundMessage> outcomes_ GS_GUARDED_BY(mutex_);  // by round
};

}  // namespace gradsync::peer
