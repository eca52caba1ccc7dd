// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_rounds.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace gradsync::peer {

LeaderRounds::LeaderRounds(Send send, Idle idle)
    : send_(std::move(send)), idle_(std::move(idle)), event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

LeadingRounds::LeadingRounds(int followers, Send send, Idle idle, std::chrono::milliseconds begin_grace)
    : LeaderRounds(std::move(send), std::move(idle)),
      followers_(followers),
      begin_grace_(begin_grace),
      holding_(static_cast<size_t>(followers) + 1, false) {}

LeadingRounds::Parts& LeadingRounds::partsLocked(uint64_t round) {
  Parts& parts = parts_[round];
  if (parts.seen.empty()) {
    parts.seen.assign(static_cast<size_t>(followers_) + 1, false);
    parts.of.resize(static_cast<size_t>(followers_) + 1);
  }
  return parts;
}

void LeadingRounds::begin(uint64_t round, const std::vector<int>* to) {
  v1::RoundMessage message;
  message.set_kind(v1::RoundMessage::BEGIN);
  message.set_round(round);
  send_(message, to);
  MutexLock lock(mutex_);
  messages_sent_ += to != nullptr ? to->size() : static_cast<uint64_t>(followers_);
}

void LeaderRounds::deliver(const v1::RoundMessage& message, int cross_rank) {
  MutexLock lock(mutex_);
  if (!aborted_.empty()) return;
  const std::string where = "round " + std::to_string(message.round()) + " of the cached steady state";
  if (message.bits_size() > static_cast<int>(kWords)) {
    failLocked(where + ": " + std::to_string(message.bits_size()) + " words of bits, more than " +
               std::to_string(kWords));
    return;
  }
  if (deliverLocked(message, cross_rank, where)) wakeLocked();
}

bool LeadingRounds::deliverLocked(const v1::RoundMessage& message, int cross_rank, const std::string& where) {
  // A follower is at most one round ahead: it sent its part of the round
  // the leader has just finished announcing.
  if (message.kind() != v1::RoundMessage::PART || cross_rank < 1 || cross_rank > followers_ ||
      message.round() < round_ || message.round() > round_ + 1) {
    failLocked(where + ": node " + std::to_string(cross_rank) + " sent it out of turn (round " +
               std::to_string(round_) + " was due)");
    return false;
  }
  Parts& parts = partsLocked(message.round());
  if (parts.seen[cross_rank]) {
    failLocked(where + ": node " + std::to_string(cross_rank) + " sent its part twice");
    return false;
  }
  parts.seen[cross_rank] = true;
  ++parts.count;
  for (size_t w = 0; w < kWords; ++w) {
    parts.bits[w] &= w < static_cast<size_t>(message.bits_size()) ? message.bits(static_cast<int>(w)) : 0;
  }
  std::vector<uint64_t>& of = parts.of[cross_rank];
  of.assign(message.bits().begin(), message.bits().end());
  while (!of.empty() && of.back() == 0) of.pop_back();
  // Only the first part of a round (it begins: waitForPeers) and the
  // last (exchange's wait ends) change what a waiter looks at: a
  // thousand followers' parts would otherwise wake the executor a
  // thousand times.
  return parts.count == 1 || parts.count == followers_;
}

bool FollowingRounds::deliverLocked(const v1::RoundMessage& message, int, const std::string& where) {
  if (message.kind() == v1::RoundMessage::BEGIN) {
    begun_ = std::max(begun_, message.round());
  } else if (message.kind() == v1::RoundMessage::OUTCOME && message.round() >= round_) {
    outcomes_[message.round()] = message;
  } else {
    failLocked(where + ": the leader sent it out of turn (round " + std::to_string(round_) + " was due)");
    return false;
  }
  return true;
}

void LeaderRounds::abort(const std::string& reason) {
  MutexLock lock(mutex_);
  if (aborted_.empty()) failLocked(reason);
}

void LeaderRounds::failLocked(const std::string& reason) {
  aborted_ = reason;
  wakeLocked();
}

void LeaderRounds::wakeLocked() {
  cv_.notify_all();
  const uint64_t one = 1;
  (void)!::write(event_fd_.get(), &one, sizeof one);
}

bool LeadingRounds::begunLocked() const {
  auto it = parts_.find(round_);
  return it != parts_.end() && it->second.count > 0;
}

bool FollowingRounds::begunLocked() const { return begun_ >= round_ || outcomes_.count(round_) > 0; }

StatusOr<bool> LeaderRounds::waitForPeers(int wake_fd, transport::Clock::time_point until) {
  for (;;) {
    {
      MutexLock lock(mutex_);
      if (!aborted_.empty()) return aborted(aborted_);
      if (begunLocked()) return true;
    }
    const auto now = transport::Clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    if (left <= 0) return false;
    // Drive the data plane meanwhile where there is one; then look at
    // once, or else wait here.
    const bool driven = idle_ && idle_({event_fd_.get(), wake_fd}, std::min(until, now + std::chrono::seconds(1)));
    pollfd fds[2] = {{event_fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int ready = ::poll(fds, wake_fd >= 0 ? 2 : 1, driven ? 0 : static_cast<int>(std::min<int64_t>(left, 1000)));
    uint64_t drained;
    while (::read(event_fd_.get(), &drained, sizeof drained) > 0) {
    }
    if (ready > 0 && wake_fd >= 0 && (fds[1].revents & POLLIN) != 0) {
      MutexLock lock(mutex_);
      return begunLocked();
    }
  }
}

StatusOr<RoundExchange::Outcome> LeadingRounds::exchange(const std::vector<uint64_t>& ready, LeaderPart part,
                                                         transport::Clock::time_point deadline) {
  std::vector<uint64_t> mine = idsToBits(ready);
  uint64_t round;
  bool everyone;                 // a batch of the leader's to order: every follower takes part now
  std::vector<int> begun, rest;  // followers that hold ids (begun at once), and the others still silent
  {
    MutexLock lock(mutex_);
    if (!aborted_.empty()) return aborted(aborted_);
    round = round_;
    const Parts& parts = partsLocked(round);
    everyone = part.sequence != announced_sequence_ && parts.count < followers_;
    for (int f = 1; f <= followers_ && !everyone; ++f) {
      if (!parts.seen[f]) (holding_[f] ? begun : rest).push_back(f);
    }
  }
  if (everyone) {
    begin(round, nullptr);
  } else if (!begun.empty()) {
    begin(round, &begun);
  }
  {
    MutexLock lock(mutex_);
    const auto all_in = [&]() GS_REQUIRES(mutex_) { return !aborted_.empty() || parts_[round].count == followers_; };
    bool all =
        cv_.wait_until(lock, everyone ? deadline : std::min(deadline, transport::Clock::now() + begin_grace_), all_in);
    if (!all && !everyone && aborted_.empty()) {
      // The others have not begun on their own: they join now.
      const Parts& parts = parts_[round];
      rest.erase(std::remove_if(rest.begin(), rest.end(), [&](int f) { return parts.seen[f]; }), rest.end());
      lock.unlock();
      begin(round, &rest);
      lock.lock();
      all = cv_.wait_until(lock, deadline, all_in);
    }
    if (!aborted_.empty()) return aborted(aborted_);
    if (!all) return missingPartsLocked(round);
    closeRoundLocked(round, part, &mine);
  }
  Outcome result;
  result.leader_sequence = part.sequence;
  result.fusion_threshold_bytes = part.fusion_threshold_bytes;
  result.ids = bitsToIds(mine.data(), mine.size());
  sendOutcome(round, std::move(mine), part);
  return result;
}

void LeadingRounds::closeRoundLocked(uint64_t round, LeaderPart part, std::vector<uint64_t>* mine) {
  Parts& parts = parts_[round];
  mine->resize(kWords, 0);
  for (size_t w = 0; w < kWords; ++w) (*mine)[w] &= parts.bits[w];
  for (int f = 1; f <= followers_; ++f) {
    const std::vector<uint64_t>& of = parts.of[f];
    holding_[f] = false;
    for (size_t w = 0; w < of.size() && !holding_[f]; ++w) holding_[f] = (of[w] & ~(*mine)[w]) != 0;
  }
  announced_sequence_ = part.sequence;
  parts_.erase(round);
  ++round_;
  messages_sent_ += static_cast<uint64_t>(followers_);
}

Status LeadingRounds::missingPartsLocked(uint64_t round) {
  const Parts& parts = parts_[round];
  std::string missing;
  int listed = 0;
  for (int node = 1; node <= followers_ && listed < 8; ++node) {
    if (parts.seen[node]) continue;
    missing += (missing.empty() ? "" : ", ") + std::to_string(node);
    ++listed;
  }
  return deadlineExceeded("round " + std::to_string(round) +
                          " of the cached steady state: " + std::to_string(followers_ - parts.count) + " of " +
                          std::to_string(followers_) + " follower nodes sent no part (nodes " + missing +
                          (followers_ - parts.count > listed ? ", ..." : "") + ")");
}

void LeadingRounds::sendOutcome(uint64_t round, std::vector<uint64_t> bits, LeaderPart part) {
  v1::RoundMessage outcome;
  outcome.set_kind(v1::RoundMessage::OUTCOME);
  outcome.set_round(round);
  while (!bits.empty() && bits.back() == 0) bits.pop_back();
  for (uint64_t w : bits) outcome.add_bits(w);
  outcome.set_leader_sequence(part.sequence);
  outcome.set_fusion_threshold_bytes(part.fusion_threshold_bytes);
  send_(outcome, nullptr);
}

StatusOr<RoundExchange::Outcome> FollowingRounds::exchange(const std::vector<uint64_t>& ready, LeaderPart,
                                                           transport::Clock::time_point deadline) {
  std::vector<uint64_t> mine = idsToBits(ready);
  v1::RoundMessage message;
  message.set_kind(v1::RoundMessage::PART);
  for (uint64_t w : mine) message.add_bits(w);
  uint64_t round;
  {
    MutexLock lock(mutex_);
    if (!aborted_.empty()) return aborted(aborted_);
    round = round_;
    ++messages_sent_;
  }
  message.set_round(round);
  send_(message, nullptr);
  MutexLock lock(mutex_);
  if (!cv_.wait_until(lock, deadline,
                      [&]() GS_REQUIRES(mutex_) { return !aborted_.empty() || outcomes_.count(round) > 0; })) {
    return deadlineExceeded("round " + std::to_string(round) +
                            " of the cached steady state: no outcome from the leader in time");
  }
  if (!aborted_.empty()) return aborted(aborted_);
  const v1::RoundMessage outcome = std::move(outcomes_[round]);
  outcomes_.erase(round);
  ++round_;
  Outcome result;
  result.leader_sequence = outcome.leader_sequence();
  result.fusion_threshold_bytes = outcome.fusion_threshold_bytes();
  result.ids = bitsToIds(outcome.bits().data(), static_cast<size_t>(outcome.bits_size()));
  return result;
}

uint64_t LeaderRounds::round() const {
  MutexLock lock(mutex_);
  return round_;
}

uint64_t LeaderRounds::messagesSent() const {
  MutexLock lock(mutex_);
  return messages_sent_;
}

}  // namespace gradsync::peer
