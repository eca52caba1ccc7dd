// SPDX-License-Identifier: Apache-2.0
// The steady state of a job across daemons without the leader's round trip
// (Horovod's response-cache bit vector, over the data plane): once a
// collective has been negotiated and cached, each daemon knows when all its
// own ranks submitted it again. In lock-step rounds the daemons reduce the
// bit vectors of the cache ids their ranks are all ready for (a bitwise AND
// by recursive doubling: log2 N messages per daemon and round, not N-1);
// the ids every daemon set run at once, in increasing order, on every
// daemon. The leader adds the sequence of the last batch it negotiated the
// usual way, which every daemon runs first, so the two kinds of work keep
// one order everywhere, and the fusion threshold the round's collectives
// run with (every daemon must fuse alike, and autotune may change it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/recursive_doubling.h"
#include "daemon/peer/round_exchange.h"

namespace gradsync::peer {

class FastRounds : public RoundExchange {
 public:
  // `mesh`: endpoints to every daemon of the job (its sequence is unused);
  // they must outlive this.
  explicit FastRounds(collective::MeshContext mesh);
  ~FastRounds();

  StatusOr<bool> waitForPeers(int wake_fd, transport::Clock::time_point until) override;
  StatusOr<Outcome> exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                             transport::Clock::time_point deadline) override;
  void abort(const std::string& reason) override GS_EXCLUDES(abort_mutex_);
  uint64_t round() const override { return round_; }
  uint64_t messagesSent() const override { return messages_sent_; }
  static constexpr size_t messageBytes() { return sizeof(Message); }

 private:
  struct Message {
    uint64_t round = 0;
    uint64_t has_leader = 0;  // 1: the leader's part is in it
    uint64_t leader_sequence = 0;
    uint64_t fusion_threshold_bytes = 0;
    uint64_t bits[kMaxIds / 64] = {};
  };
  // The current round's reduction, its receives posted.
  collective::RecursiveDoubling& current();

  collective::MeshContext mesh_;  // sequence: the current round
  uint64_t round_ = 1;
  uint64_t messages_sent_ = 0;
  std::unique_ptr<collective::RecursiveDoubling> run_;  // of round_
  std::string abortedWhy() const GS_EXCLUDES(abort_mutex_);

  mutable Mutex abort_mutex_;
  std::string aborted_ GS_GUARDED_BY(abort_mutex_);
};

}  // namespace gradsync::peer
