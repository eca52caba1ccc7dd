// SPDX-License-Identifier: Apache-2.0
// The steady state's lock-step rounds as the job sees them (Horovod's
// response-cache bit vector): each daemon brings the cache ids its ranks
// are all ready for, and every daemon learns those all of them brought,
// with the leader's part (the last batch it negotiated the usual way, and
// the fusion threshold). Two ways: among the daemons by recursive doubling
// over the data plane (FastRounds), or through the leader over the
// coordination streams (LeaderRounds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/transport/transport.h"

namespace gradsync::peer {

class RoundExchange {
 public:
  // Cache ids 1..kMaxIds take part (a bit each).
  static constexpr uint64_t kMaxIds = 4096;
  // What the leader adds to its part of a round.
  struct LeaderPart {
    uint64_t sequence = 0;                // of the last batch it negotiated
    uint64_t fusion_threshold_bytes = 0;  // the round's collectives fuse up to this
  };
  struct Outcome {
    uint64_t leader_sequence = 0;         // run the leader's batches up to this one first
    std::vector<uint64_t> ids;            // then these, increasing: every daemon's ranks are ready
    uint64_t fusion_threshold_bytes = 0;  // fused as the leader said (0: it did not)
  };

  virtual ~RoundExchange() = default;
  // Waits until another daemon has begun the current round (true),
  // `wake_fd` is readable or `until` passes (false).
  virtual StatusOr<bool> waitForPeers(int wake_fd, transport::Clock::time_point until) = 0;
  // This daemon's part of the current round: `ready` (ids above kMaxIds are
  // left out) and, on the leader, `leader` (ignored elsewhere). Takes part
  // until `deadline`; then the next round begins.
  virtual StatusOr<Outcome> exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                                     transport::Clock::time_point deadline) = 0;
  // Ends the exchange under way and every later one with `reason`
  // (ABORTED), from any thread: the job failed, and the other daemons
  // stop taking part in rounds.
  virtual void abort(const std::string& reason) = 0;
  virtual uint64_t round() const = 0;
  // Messages this daemon sent in all rounds so far.
  virtual uint64_t messagesSent() const = 0;
};

// Cache ids 1..kMaxIds as a round's bits (bit i of word i / 64 stands for
// id i + 1; trailing zero words left out), and back, increasing.
inline std::vector<uint64_t> idsToBits(const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> words(RoundExchange::kMaxIds / 64, 0);
  for (uint64_t id : ids) {
    if (id >= 1 && id <= RoundExchange::kMaxIds) words[(id - 1) / 64] |= uint64_t{1} << ((id - 1) % 64);
  }
  while (!words.empty() && words.back() == 0) words.pop_back();
  return words;
}

inline std::vector<uint64_t> bitsToIds(const uint64_t* words, size_t count) {
  std::vector<uint64_t> ids;
  for (size_t w = 0; w < count; ++w) {
    for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
      ids.push_back(w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)) + 1);
    }
  }
  return ids;
}

}  // namespace gradsync::peer
