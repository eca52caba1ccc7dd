// SPDX-License-Identifier: Apache-2.0
// One daemon's side of a leader election (leader failover), as rules
// without I/O, locks or waits (CrossNode asks for and answers the votes):
// a daemon votes once per epoch, and records for whom (while its vote for
// another may count, it refuses votes for itself); a candidate counts votes
// only once it has lost the leader of that epoch itself (a follower cut off
// alone cannot depose a live leader), counts its own, and counts a voter's
// only while the voter waits for the answer (one that gave up is withdrawn,
// and may vote again); only votes of the current epoch count; the first to
// reach a strict majority of the job's daemons takes over, once. Two
// majorities cannot form, so two leaders cannot either.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "base/status.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::membership {

class Ballot {
 public:
  explicit Ballot(std::string self) : self_(std::move(self)) {}

  // This daemon lost its leader in `epoch`.
  void leaderLost(uint64_t epoch) { lost_leader_epoch_ = epoch; }
  bool lostLeaderIn(uint64_t epoch) const { return lost_leader_epoch_ == epoch; }

  // `voter` votes for this daemon in `epoch` (the caller checked that this
  // daemon lost the leader of `epoch` too): this daemon votes for itself
  // with it. FAILED_PRECONDITION when this daemon voted for another in it.
  // True when the votes now reach `majority` and no takeover began: the
  // caller takes over (takingOver) and announces the new epoch.
  StatusOr<bool> receive(const std::string& voter, uint64_t epoch, size_t majority);
  size_t votes() const { return votes_.size(); }
  // `voter` gave up waiting for this daemon's answer before it took over
  // (its call ended): its vote no longer counts.
  void withdraw(const std::string& voter, uint64_t epoch);

  // Voter side: this daemon votes for `candidate` in `epoch` (asks it over
  // Elect). FAILED_PRECONDITION when it holds votes for itself in `epoch`
  // or its vote for another candidate there may still count.
  Status cast(const std::string& candidate, uint64_t epoch);
  // The candidate's answer was a refusal or came too late: the vote did not
  // count (a candidate withdraws the vote of a call that ended), and this
  // daemon may vote again in `epoch`.
  void uncast(uint64_t epoch);

  // The takeover, begun from `epoch` (voters that come meanwhile wait for
  // it), and the epoch it leads once announced: the answer to the voters of
  // `epoch` (null while there is none).
  void takingOver(uint64_t epoch);
  bool takingOverFrom(uint64_t epoch) const { return epoch != 0 && leading_from_ == epoch; }
  void tookOver(v1::NewEpoch change) { took_over_ = std::move(change); }
  const v1::NewEpoch* decided(uint64_t epoch) const;

 private:
  const std::string self_;
  uint64_t lost_leader_epoch_ = 0;
  // The epoch voted_for_ and votes_ belong to (a new one clears them).
  void enter(uint64_t epoch);
  uint64_t round_ = 0;
  std::string voted_for_;        // this daemon's vote (itself, or a candidate)
  std::set<std::string> votes_;  // for this daemon
  uint64_t leading_from_ = 0;
  std::optional<v1::NewEpoch> took_over_;
};

}  // namespace gradsync::membership
