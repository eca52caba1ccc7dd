// SPDX-License-Identifier: Apache-2.0
// The ranks of one job on this daemon: the sessions of the current epoch by
// rank, the ranks and local ranks that ever registered here, and (elastic
// jobs) the new ranks waiting to be admitted at a commit, with which of
// them a follower has reported to its leader. Pure state: the Job guards it
// with its lock.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "daemon/server/session.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

class JobRanks {
 public:
  using ByRank = std::map<int, std::shared_ptr<Session>>;
  using Messages = std::vector<std::pair<std::shared_ptr<Session>, v1::DaemonMessage>>;
  // Joiners of this node becoming ranks (their new numbers).
  using Admitted = std::vector<std::pair<int, std::shared_ptr<Session>>>;

  explicit JobRanks(std::string job_id) : job_id_(std::move(job_id)) {}

  // A registered rank. ALREADY_EXISTS (naming who holds it) when taken.
  Status add(std::shared_ptr<Session> session);
  // `session` leaves: what it was.
  enum class Left { kUnknown, kRank, kJoiner, kReportedJoiner };
  Left remove(const Session& session);
  // No rank and no joiner is left.
  bool empty() const { return sessions_.empty() && joiners_.empty(); }

  const ByRank& byRank() const { return sessions_; }
  std::shared_ptr<Session> find(int rank) const;
  int count() const { return static_cast<int>(sessions_.size()); }
  // Ranks that registered here (never shrinks within an epoch: a rank that
  // left is still this node's), and how many.
  bool registeredHere(int rank) const { return registered_.count(rank) > 0; }
  const std::set<int>& registered() const { return registered_; }
  // Those of `expected` local ranks that never registered (numbered as the
  // job's ranks when `by_rank`, else as local ranks).
  std::vector<int> neverRegistered(int expected, bool by_rank) const;

  // Elastic jobs: a new rank waits to be admitted.
  void addJoiner(std::shared_ptr<Session> session) { joiners_.push_back(std::move(session)); }
  size_t joinerCount() const { return joiners_.size(); }
  // Joiners whose session stream is open: the word of their place goes over
  // it (a message to a session without one would be lost).
  size_t readyJoinerCount() const;
  std::vector<uint64_t> readyJoinerIds() const;
  // The ready joiners become ranks, numbered after the ranks there are;
  // returns how many.
  int admitReadyJoiners();
  // The joiner of session `id` (null: gone), no longer waiting.
  std::shared_ptr<Session> takeJoiner(uint64_t id);
  // Every joiner, no longer waiting, each with a message that refuses it
  // (`cause`).
  Messages refuseJoiners(const std::string& cause);
  // Follower: the ready joiners the leader was not told of yet, marked as
  // told. `leader_changes`: how many leaders it followed (a new leader
  // knows none of them).
  std::vector<std::shared_ptr<Session>> unreportedJoiners(uint64_t leader_changes);

  // A new epoch: the ranks in `survivors` (increasing: a survivor's new rank
  // is its index) and `admitted` stay, renumbered; the others are left out,
  // each with a message that refuses it. The ranks registered here become
  // those of the new epoch.
  Messages renumber(uint64_t epoch, const std::vector<int>& survivors, const Admitted& admitted,
                    const std::string& cause);
  // Each rank's place in `epoch` of `size` ranks (MembershipChange), local
  // ranks in rank order.
  Messages places(uint64_t epoch, int size, const std::string& cause) const;
  // Each rank (which may wait in rejoin) refused with `cause`.
  Messages refuseRanks(const std::string& cause) const;

 private:
  const std::string job_id_;
  ByRank sessions_;
  std::set<int> registered_;        // ranks that registered here
  std::set<int> registered_local_;  // their local ranks
  std::vector<std::shared_ptr<Session>> joiners_;
  std::set<uint64_t> reported_;  // follower: joiners' session ids told to the leader
  uint64_t leader_changes_seen_ = 0;
};

// To a rank waiting in its rejoin (or to join): the job will not take it.
v1::DaemonMessage refusal(const std::string& cause);

}  // namespace gradsync::server
