// SPDX-License-Identifier: Apache-2.0
// The output buffers one job's local ranks grant: a collective whose output
// size only the daemon knows (allgather, alltoall, reducescatter) asks each
// rank for room in its arena, and runs once every rank answered. This holds
// the grants asked for, the answers, and the wait in progress (one at a
// time, for gradsyncctl), and checks an answer before the executor writes
// to it. Rules only: the Job's lock guards it, and the Job waits.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "handoff/shm_arena.h"
#include "proto/gradsync/v1/admin.pb.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

class OutputGrants {
 public:
  using Clock = std::chrono::steady_clock;
  using Key = std::pair<int, uint64_t>;  // (rank, handle)

  // The executor asks `key`'s rank for its output (the request went out).
  void expect(const Key& key) { expected_.insert(key); }
  // A rank's answer; false when none was asked for (late: the wait ended,
  // or a new epoch forgot it).
  bool deliver(const Key& key, const v1::OutputGrant& grant);
  // The executor waits for `keys` of `tensor` from `since`.
  void beginWait(const std::string& tensor, const std::vector<Key>& keys, Clock::time_point since);
  bool allGranted(const std::vector<Key>& keys) const;
  // Ends the wait: the answers there are (in the order of `keys`) and the
  // ranks that gave none; `keys` are forgotten.
  struct Outcome {
    std::vector<v1::OutputGrant> answers;
    std::vector<int> waiting;
  };
  Outcome endWait(const std::vector<Key>& keys);
  // A new epoch: every grant asked for belongs to the old one.
  void clear();
  // The wait in progress (gradsyncctl tensors): none, or one.
  void describe(Clock::time_point now, v1::JobTensors* out) const;

  // Where a rank's answer `grant` to a request of `expected` bytes lets the
  // executor write in `arena` (`who`: the rank, for errors): the grant's
  // own error, a length other than asked, or a range outside the arena are
  // refused.
  static StatusOr<uint8_t*> pointer(const std::string& who, const handoff::ShmArena* arena,
                                    const v1::OutputGrant& grant, uint64_t expected);

 private:
  std::set<Key> expected_;
  std::map<Key, v1::OutputGrant> granted_;
  struct Wait {
    std::string tensor;
    Clock::time_point since;
    std::vector<Key> keys;
  };
  std::optional<Wait> wait_;
};

}  // namespace gradsync::server
