// SPDX-License-Identifier: Apache-2.0
// The membership of a job spanning daemons, epoch by epoch: which node holds
// which ranks now, how the ranks of an older epoch are numbered now, the
// ranks waiting to join, the nodes waiting to become members for them
// (candidates), and the nodes removed (and why). It decides each next epoch
// (a loss, an admission, a leader's takeover) and applies the leader's on a
// follower. No I/O, no lock, no dependency on a Job: its owner (the peer
// side's CrossNode) guards it, tells the other daemons and moves the
// streams; this type is the rules.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::membership {

// A new rank waiting on the node at `peer_address` to join at the next
// commit (the id its daemon gave it).
struct Joiner {
  std::string peer_address;
  uint64_t id = 0;
  int64_t pid = 0;
};

// "node a:1 (host h, ranks [0, 1])", for messages.
std::string describeNode(const v1::NodeInfo& node);

class EpochBook {
 public:
  // `self_address`: this daemon's peer address; `min_size`: below it an
  // epoch waits for joiners (NewEpoch.below_minimum).
  EpochBook(std::string job_id, std::string self_address, int min_size);

  // The membership the job formed with (the leader's, or the one a
  // follower's JoinJob answered), at `epoch`.
  void form(std::vector<v1::NodeInfo> members, uint64_t epoch);
  bool formed() const { return !members_.empty(); }
  uint64_t epoch() const { return epoch_; }
  // The nodes of the current epoch, in ring order (cross_rank = index).
  const std::vector<v1::NodeInfo>& members() const { return members_; }
  // The member at `peer_address` (nullptr: none).
  const v1::NodeInfo* member(const std::string& peer_address) const;
  // This daemon's cross rank in the current epoch (-1: not a member).
  int selfCrossRank() const;

  // Leader: `rank` of `epoch` in the current numbering (-1: gone since, or
  // an epoch to come).
  int translate(int rank, uint64_t epoch) const;

  // Leader, the next epoch. Each returns the change to announce; the old
  // epoch's members no longer in it are removed (removedWhy names why).
  //
  // Without `lost` (ranks numbered as in `epoch`): survivors keep their
  // order and are renumbered, nodes left without ranks are removed unless
  // ranks wait to join there (admitted in this epoch). NOT_FOUND when every
  // lost rank is gone already; FAILED_PRECONDITION (nothing changes) when
  // the leader's node would hold no rank.
  StatusOr<v1::NewEpoch> lose(const std::vector<int>& lost, uint64_t epoch, const std::string& cause);
  // With the joiners waiting (`local`: the leader's own, by id; and those
  // the followers reported), numbered after the current ranks node by node
  // (the members in ring order, then the candidates), each node's in the
  // order they came.
  // With none left, an epoch all the same (the ranks were told one comes);
  // `when` ends the cause ("at the commit 'x'").
  StatusOr<v1::NewEpoch> admit(const std::vector<uint64_t>& local, const std::string& when);
  // Failover: this daemon leads (cross rank 0) in place of the lost leader,
  // whose node and ranks go.
  StatusOr<v1::NewEpoch> takeOver();

  // Follower: the leader's change. kStale: not newer than this epoch;
  // kRemoved: this node is not in it (the membership stays as it was).
  enum class Applied { kStale, kApplied, kRemoved };
  Applied apply(const v1::NewEpoch& change);

  // Leader: ranks waiting to join, reported by the followers.
  void addJoiner(Joiner joiner) { joiners_.push_back(std::move(joiner)); }
  void removeJoiner(const std::string& peer_address, uint64_t id);
  // The node left or was lost: its joiners go with it.
  void dropJoinersOf(const std::string& peer_address);
  size_t joinerCount() const { return joiners_.size(); }

  // Leader: a node holding no rank joins the running job for its new ranks
  // (kept as a candidate until a commit admits them). ALREADY_EXISTS for a
  // member; INVALID_ARGUMENT when it holds ranks. A node removed earlier
  // comes back as a new one; a second join replaces the first.
  Status addCandidate(const v1::NodeInfo& node);
  // The candidate left before its ranks were admitted (it and its joiners
  // are forgotten); false when it is no candidate.
  bool dropCandidate(const std::string& peer_address);
  bool isCandidate(const std::string& peer_address) const { return candidates_.count(peer_address) > 0; }

  // Leader: why the node at `peer_address` was removed (empty: it was not).
  std::string removedWhy(const std::string& peer_address) const;
  // Leader: CheckMember's answer for the node at `peer_address`.
  v1::CheckMemberResponse check(const std::string& peer_address) const;

 private:
  // Moves to the next epoch without `gone` (current numbering) and with
  // `joiners`.
  StatusOr<v1::NewEpoch> next(const std::vector<int>& gone, const std::vector<Joiner>& joiners,
                              const std::string& cause);
  // The new epoch's nodes, renumbered (`survivors`: the ranks kept, in
  // order); the admitted joiners go into `change`.
  StatusOr<std::vector<v1::NodeInfo>> nextMembers(const std::vector<int>& gone, const std::vector<int>& survivors,
                                                  const std::vector<Joiner>& joiners, const std::string& cause,
                                                  v1::NewEpoch* change) const;
  // The joiners of the followers that `gone` leaves without ranks, taken
  // out of joiners_: the loss's epoch admits them, so the node stays.
  std::vector<Joiner> takeJoinersOfEmptied(const std::vector<int>& gone);

  const std::string job_id_;
  const std::string self_address_;
  const int min_size_;
  std::vector<v1::NodeInfo> members_;
  uint64_t epoch_ = 1;
  std::map<uint64_t, std::vector<int>> survivors_;  // epoch E -> the ranks of E kept in E + 1
  std::map<std::string, std::string> removed_;      // peer address -> why it was removed
  std::vector<Joiner> joiners_;                     // reported by followers, in order
  std::map<std::string, v1::NodeInfo> candidates_;  // by peer address
};

}  // namespace gradsync::membership
