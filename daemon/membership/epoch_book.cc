// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/epoch_book.h"

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/coordinator/request.h"

namespace gradsync::membership {
namespace {

bool contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

}  // namespace

std::string describeNode(const v1::NodeInfo& node) {
  return "node " + node.peer_address() + " (host " + node.hostname() + ", ranks " +
         coordinator::ranksString({node.ranks().begin(), node.ranks().end()}) + ")";
}

EpochBook::EpochBook(std::string job_id, std::string self_address, int min_size)
    : job_id_(std::move(job_id)), self_address_(std::move(self_address)), min_size_(min_size) {}

void EpochBook::form(std::vector<v1::NodeInfo> members, uint64_t epoch) {
  members_ = std::move(members);
  epoch_ = epoch;
}

const v1::NodeInfo* EpochBook::member(const std::string& peer_address) const {
  auto it = std::find_if(members_.begin(), members_.end(),
                         [&](const v1::NodeInfo& n) { return n.peer_address() == peer_address; });
  return it == members_.end() ? nullptr : &*it;
}

int EpochBook::selfCrossRank() const {
  const v1::NodeInfo* self = member(self_address_);
  return self ? self->cross_rank() : -1;
}

int EpochBook::translate(int rank, uint64_t epoch) const {
  if (epoch > epoch_) return -1;
  for (uint64_t e = epoch; e < epoch_; ++e) {
    auto it = survivors_.find(e);
    if (it == survivors_.end()) return -1;
    auto at = std::lower_bound(it->second.begin(), it->second.end(), rank);
    if (at == it->second.end() || *at != rank) return -1;
    rank = static_cast<int>(at - it->second.begin());
  }
  return rank;
}

StatusOr<v1::NewEpoch> EpochBook::lose(const std::vector<int>& lost, uint64_t epoch, const std::string& cause) {
  if (!formed()) return failedPrecondition("job '" + job_id_ + "' has not formed yet");
  std::vector<int> gone;
  for (int rank : lost) {
    const int now = translate(rank, epoch);
    if (now >= 0) gone.push_back(now);
  }
  if (gone.empty()) return notFound("job '" + job_id_ + "': the lost ranks are gone already");
  return next(gone, takeJoinersOfEmptied(gone), cause);
}

std::vector<Joiner> EpochBook::takeJoinersOfEmptied(const std::vector<int>& gone) {
  std::vector<Joiner> taken;
  for (const auto& node : members_) {
    if (node.cross_rank() == 0) continue;  // the leader's node never empties: the job fails first
    const bool emptied =
        std::all_of(node.ranks().begin(), node.ranks().end(), [&](int rank) { return contains(gone, rank); });
    if (!emptied) continue;
    auto mine = std::stable_partition(joiners_.begin(), joiners_.end(),
                                      [&](const Joiner& j) { return j.peer_address != node.peer_address(); });
    if (mine == joiners_.end()) continue;
    GS_LOG(control, info,
           "job '{}': node {} lost its last rank while {} new ranks waited there: they join in the "
           "same epoch, and the node stays",
           job_id_, node.peer_address(), joiners_.end() - mine);
    taken.insert(taken.end(), mine, joiners_.end());
    joiners_.erase(mine, joiners_.end());
  }
  return taken;
}

StatusOr<v1::NewEpoch> EpochBook::admit(const std::vector<uint64_t>& local, const std::string& when) {
  if (!formed()) return failedPrecondition("job '" + job_id_ + "' has not formed yet");
  std::vector<Joiner> joiners;
  for (uint64_t id : local) joiners.push_back({self_address_, id});
  joiners.insert(joiners.end(), joiners_.begin(), joiners_.end());
  joiners_.clear();
  // Every rank was told this commit admits joiners and waits for the new
  // epoch: it comes even when the joiners left meanwhile.
  return next({}, joiners,
              joiners.empty() ? "new ranks were to join " + when + ", and left meanwhile"
                              : "admitted " + std::to_string(joiners.size()) + " new ranks " + when);
}

StatusOr<v1::NewEpoch> EpochBook::takeOver() {
  if (!formed()) return failedPrecondition("job '" + job_id_ + "' has not formed yet");
  const v1::NodeInfo lost = members_.front();  // cross rank 0
  if (lost.peer_address() == self_address_) return failedPrecondition(self_address_ + " leads already");
  std::vector<int> gone(lost.ranks().begin(), lost.ranks().end());
  // This daemon first (it leads), then the others in ring order.
  std::vector<v1::NodeInfo> nodes;
  for (const auto& node : members_) {
    if (node.peer_address() == self_address_) nodes.insert(nodes.begin(), node);
  }
  for (const auto& node : members_) {
    if (node.peer_address() != self_address_) nodes.push_back(node);
  }
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].set_cross_rank(static_cast<int>(i));
  members_ = std::move(nodes);
  removed_[lost.peer_address()] = describeNode(lost) + " was the leader and is lost; the job failed over";
  GS_LOG(control, warn, "job '{}': {} takes over as leader (a majority voted) in place of {}", job_id_, self_address_,
         describeNode(lost));
  return next(gone, {}, "lost the leader " + describeNode(lost) + "; " + self_address_ + " leads by a majority vote");
}

StatusOr<v1::NewEpoch> EpochBook::next(const std::vector<int>& gone, const std::vector<Joiner>& joiners,
                                       const std::string& cause) {
  std::vector<int> all;
  for (const auto& node : members_) all.insert(all.end(), node.ranks().begin(), node.ranks().end());
  std::sort(all.begin(), all.end());
  std::vector<int> survivors;
  for (int rank : all) {
    if (!contains(gone, rank)) survivors.push_back(rank);
  }
  v1::NewEpoch change;
  ASSIGN_OR_RETURN(auto nodes, nextMembers(gone, survivors, joiners, cause, &change));
  survivors_[epoch_] = survivors;
  ++epoch_;
  change.set_epoch(epoch_);
  change.set_cause(cause);
  for (int rank : survivors) change.add_survivors(rank);
  for (const auto& node : nodes) *change.add_nodes() = node;
  change.set_below_minimum(change.survivors_size() + change.admitted_size() < min_size_);
  const std::vector<v1::NodeInfo> old = std::exchange(members_, std::move(nodes));
  for (const auto& node : old) {
    if (member(node.peer_address())) continue;
    // A reason given already (the lost leader's) stays.
    removed_.emplace(node.peer_address(), describeNode(node) + " was removed from job '" + job_id_ + "' at epoch " +
                                              std::to_string(epoch_) + " (" + cause +
                                              "); anything it sends is refused as stale");
  }
  for (auto it = candidates_.begin(); it != candidates_.end();) {
    const v1::NodeInfo* joined = member(it->first);
    if (!joined) {
      ++it;
      continue;
    }
    GS_LOG(control, info, "job '{}': node {} joins the job at epoch {} as node {}", job_id_, it->first, epoch_,
           joined->cross_rank());
    it = candidates_.erase(it);
  }
  return change;
}

StatusOr<std::vector<v1::NodeInfo>> EpochBook::nextMembers(const std::vector<int>& gone,
                                                           const std::vector<int>& survivors,
                                                           const std::vector<Joiner>& joiners, const std::string& cause,
                                                           v1::NewEpoch* change) const {
  const auto renumbered = [&](int rank) {
    return static_cast<int>(std::lower_bound(survivors.begin(), survivors.end(), rank) - survivors.begin());
  };
  // Candidates with a joiner to admit become members, after the others.
  std::vector<v1::NodeInfo> placed = members_;
  for (const auto& candidate : candidates_) {
    const std::string& address = candidate.first;
    const bool admits =
        std::any_of(joiners.begin(), joiners.end(), [&](const Joiner& j) { return j.peer_address == address; });
    if (admits) placed.push_back(candidate.second);
  }
  std::vector<v1::NodeInfo> nodes;
  for (const auto& node : placed) {
    v1::NodeInfo next = node;
    next.clear_ranks();
    next.clear_pids();
    for (int i = 0; i < node.ranks_size(); ++i) {
      if (contains(gone, node.ranks(i))) continue;
      next.add_ranks(renumbered(node.ranks(i)));
      next.add_pids(i < node.pids_size() ? node.pids(i) : 0);
    }
    // Joiners after every survivor, in the order they came.
    for (const auto& joiner : joiners) {
      if (joiner.peer_address != node.peer_address()) continue;
      auto* admitted = change->add_admitted();
      admitted->set_peer_address(joiner.peer_address);
      admitted->set_joiner_id(joiner.id);
      admitted->set_rank(static_cast<int>(survivors.size()) + change->admitted_size() - 1);
      next.add_ranks(admitted->rank());
      next.add_pids(joiner.pid);
    }
    if (next.ranks().empty()) {
      if (node.cross_rank() == 0) {
        return failedPrecondition(cause + "; the leader's node (" + self_address_ +
                                  ") would hold no rank, and the leader does not move");
      }
      continue;
    }
    nodes.push_back(std::move(next));
  }
  // The leader first, then by lowest rank: the ring order.
  std::sort(nodes.begin() + 1, nodes.end(),
            [](const v1::NodeInfo& a, const v1::NodeInfo& b) { return a.ranks(0) < b.ranks(0); });
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].set_cross_rank(static_cast<int>(i));
  return nodes;
}

EpochBook::Applied EpochBook::apply(const v1::NewEpoch& change) {
  if (change.epoch() <= epoch_) return Applied::kStale;
  const bool member = std::any_of(change.nodes().begin(), change.nodes().end(),
                                  [&](const v1::NodeInfo& n) { return n.peer_address() == self_address_; });
  if (!member) return Applied::kRemoved;
  epoch_ = change.epoch();
  members_.assign(change.nodes().begin(), change.nodes().end());
  return Applied::kApplied;
}

void EpochBook::removeJoiner(const std::string& peer_address, uint64_t id) {
  joiners_.erase(std::remove_if(joiners_.begin(), joiners_.end(),
                                [&](const Joiner& j) { return j.peer_address == peer_address && j.id == id; }),
                 joiners_.end());
}

void EpochBook::dropJoinersOf(const std::string& peer_address) {
  joiners_.erase(
      std::remove_if(joiners_.begin(), joiners_.end(), [&](const Joiner& j) { return j.peer_address == peer_address; }),
      joiners_.end());
}

Status EpochBook::addCandidate(const v1::NodeInfo& node) {
  const std::string& address = node.peer_address();
  if (!formed()) return notFound("job '" + job_id_ + "' has not formed yet");  // retried
  if (!node.ranks().empty()) {
    return invalidArgument("job '" + job_id_ + "': a node joining the running job holds no rank yet");
  }
  if (member(address)) return alreadyExists("job '" + job_id_ + "': " + address + " is a node of the job already");
  removed_.erase(address);
  v1::NodeInfo candidate = node;
  candidate.set_cross_rank(-1);
  candidates_[address] = std::move(candidate);
  return okStatus();
}

bool EpochBook::dropCandidate(const std::string& peer_address) {
  if (candidates_.erase(peer_address) == 0) return false;
  dropJoinersOf(peer_address);
  return true;
}

std::string EpochBook::removedWhy(const std::string& peer_address) const {
  auto it = removed_.find(peer_address);
  return it == removed_.end() ? "" : it->second;
}

v1::CheckMemberResponse EpochBook::check(const std::string& peer_address) const {
  v1::CheckMemberResponse response;
  response.set_epoch(epoch_);
  const std::string why = removedWhy(peer_address);
  if (!why.empty()) {
    response.set_removed(why);
  } else {
    response.set_member(member(peer_address) != nullptr);
  }
  return response;
}

}  // namespace gradsync::membership
