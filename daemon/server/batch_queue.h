// SPDX-License-Identifier: Apache-2.0
// The order in which one job's negotiated collectives run on this daemon,
// one batch at a time: the collectives negotiated here (one daemon, or the
// leader, which numbers its batches for the followers), and on a follower
// the leader's batches in the order they came, each with the fusion
// threshold the leader ran it with (sequence 0: errors only, run without a
// ring). Rules only: the Job's lock guards it, and the Job waits on it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "daemon/coordinator/request.h"

namespace gradsync::server {

class BatchQueue {
 public:
  struct Batch {
    std::vector<coordinator::Response> responses;
    uint64_t sequence = 0;                // the leader's numbering (0: one daemon, or errors only)
    uint64_t fusion_threshold_bytes = 0;  // the leader's (0: this daemon's)
    bool lead = false;                    // the leader's own: to broadcast before it runs
  };

  // Negotiated here.
  void addReady(std::vector<coordinator::Response> responses);
  const std::deque<coordinator::Response>& ready() const { return ready_; }
  uint64_t bytesReady() const;
  // Follower: a batch of the leader.
  void addRemote(Batch batch);
  bool hasRemote() const { return !remote_.empty(); }

  // Whether a batch can begin: none executes and one waits.
  bool runnable() const { return !executing_ && (!ready_.empty() || !remote_.empty()); }
  bool executing() const { return executing_; }
  // The next batch, which begins (executing() until finished()): the
  // leader's oldest (a follower), else what is ready here, numbered as the
  // leader's next batch when `lead`.
  Batch next(bool lead);
  // Leader in the rounds: what is ready here as its next batch (empty, and
  // nothing begins, when nothing is), and the last batch number given.
  Batch nextLed();
  uint64_t lastSequence() const { return sequence_; }
  // Follower: the errors the leader sent (sequence 0), which begin.
  std::vector<coordinator::Response> takeErrors();
  // Follower in the rounds: the leader's oldest batch when its number is up
  // to `sequence` (it begins); nullopt when it has not come yet or is later.
  std::optional<Batch> takeRemoteUpTo(uint64_t sequence);
  // Whether the leader's batch `sequence` was taken or is here.
  bool reached(uint64_t sequence) const;
  // `responses` begin as a batch of their own (the rounds' agreed ones).
  void begin(size_t responses);
  // `count` collectives of the executing batch completed.
  void completed(size_t count) { executing_count_ -= static_cast<int>(count); }
  // The executing batch ended; another may begin.
  void finished() { executing_ = false; }

  // Everything that waits (a failure): the ready collectives, to fail;
  // the leader's batches are dropped.
  std::vector<coordinator::Response> takeAllWaiting();
  // Ready, waiting and executing collectives.
  size_t inFlight() const { return ready_.size() + static_cast<size_t>(executing_count_); }

 private:
  std::vector<coordinator::Response> takeReady();

  std::deque<coordinator::Response> ready_;
  std::deque<Batch> remote_;
  uint64_t sequence_ = 0;  // leader: its last batch's number
  uint64_t seen_ = 0;      // follower in the rounds: the leader's batches taken up to this one
  bool executing_ = false;
  int executing_count_ = 0;  // collectives of the executing batch not completed
};

}  // namespace gradsync::server
