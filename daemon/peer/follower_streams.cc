// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/follower_streams.h"

#include <algorithm>

namespace gradsync::peer {

v1::NodeInfo Follower::node() const {
  MutexLock lock(mutex_);
  return node_;
}

int Follower::crossRank() const {
  MutexLock lock(mutex_);
  return node_.cross_rank();
}

bool Follower::holdsRank(int rank) const {
  MutexLock lock(mutex_);
  return std::find(node_.ranks().begin(), node_.ranks().end(), rank) != node_.ranks().end();
}

std::string Follower::removed() const {
  MutexLock lock(mutex_);
  return removed_;
}

void Follower::renumber(v1::NodeInfo node) {
  MutexLock lock(mutex_);
  node_ = std::move(node);
}

void Follower::remove(std::string why) {
  MutexLock lock(mutex_);
  removed_ = std::move(why);
}

std::shared_ptr<Follower> FollowerStreams::attachMember(const v1::NodeInfo& node,
                                                        std::shared_ptr<FollowerStream> stream, int64_t now_ms,
                                                        std::optional<SharedMessage>* told) {
  MutexLock lock(mutex_);
  auto& slot = members_[node.cross_rank()];
  if (slot != nullptr) return nullptr;
  slot = std::make_shared<Follower>(node);
  slot->stream.attach(std::move(stream));
  slot->heardAt(now_ms);
  *told = told_;
  return slot;
}

std::shared_ptr<Follower> FollowerStreams::attachCandidate(const std::string& address,
                                                           std::shared_ptr<FollowerStream> stream, int64_t now_ms,
                                                           std::optional<SharedMessage>* told) {
  MutexLock lock(mutex_);
  auto it = candidates_.find(address);
  if (it == candidates_.end() || it->second->stream.attached()) return nullptr;
  it->second->stream.attach(std::move(stream));
  it->second->heardAt(now_ms);
  *told = told_;
  return it->second;
}

void FollowerStreams::tellEveryone(const SharedMessage& failure, const Follower* teller) {
  std::vector<std::shared_ptr<Follower>> everyone;
  {
    // One step with attach: a stream is listed here, or it reads told_.
    MutexLock lock(mutex_);
    told_ = failure;
    for (const auto& [cross_rank, f] : members_) everyone.push_back(f);
    for (const auto& [address, f] : candidates_) everyone.push_back(f);  // their new ranks wait in vain otherwise
  }
  for (const auto& f : everyone) {
    if (f.get() != teller) f->stream.send(failure);
  }
}

void FollowerStreams::addCandidate(const v1::NodeInfo& node) {
  v1::NodeInfo candidate = node;
  candidate.set_cross_rank(-1);
  MutexLock lock(mutex_);
  candidates_[node.peer_address()] = std::make_shared<Follower>(std::move(candidate));
}

bool FollowerStreams::dropCandidate(const Follower* candidate) {
  MutexLock lock(mutex_);
  auto it = candidates_.find(candidate->peerAddress());
  if (it == candidates_.end() || it->second.get() != candidate) return false;
  candidates_.erase(it);
  return true;
}

void FollowerStreams::takeOver(int64_t now_ms) {
  MutexLock lock(mutex_);
  members_.clear();
  took_over_ms_ = now_ms;
}

void FollowerStreams::resumedAt(int64_t now_ms) {
  MutexLock lock(mutex_);
  resumed_ms_ = now_ms;
}

std::vector<std::shared_ptr<Follower>> FollowerStreams::streams(bool candidates) const {
  MutexLock lock(mutex_);
  std::vector<std::shared_ptr<Follower>> streams;
  streams.reserve(members_.size() + (candidates ? candidates_.size() : 0));
  for (const auto& [cross_rank, f] : members_) streams.push_back(f);
  if (candidates) {
    for (const auto& [address, f] : candidates_) streams.push_back(f);
  }
  return streams;
}

std::vector<std::shared_ptr<Follower>> FollowerStreams::atCrossRanks(const std::vector<int>& cross_ranks) const {
  MutexLock lock(mutex_);
  // One pass each way: a round's BEGIN may go to most of a thousand followers.
  const int last = members_.empty() ? -1 : members_.rbegin()->first;
  std::vector<bool> wanted(static_cast<size_t>(last + 1), false);
  for (int rank : cross_ranks) {
    if (rank >= 0 && rank <= last) wanted[static_cast<size_t>(rank)] = true;
  }
  std::vector<std::shared_ptr<Follower>> streams;
  for (const auto& [cross_rank, f] : members_) {
    if (cross_rank >= 0 && wanted[static_cast<size_t>(cross_rank)]) streams.push_back(f);
  }
  return streams;
}

std::shared_ptr<Follower> FollowerStreams::holdingRank(int rank) const {
  MutexLock lock(mutex_);
  for (const auto& [cross_rank, f] : members_) {
    if (f->holdsRank(rank)) return f;
  }
  return nullptr;
}

size_t FollowerStreams::memberCount() const {
  MutexLock lock(mutex_);
  return members_.size();
}

bool FollowerStreams::hasMember(int cross_rank) const {
  MutexLock lock(mutex_);
  return members_.count(cross_rank) != 0;
}

size_t FollowerStreams::reachedWithin(const std::string& lost, int64_t now_ms, int64_t limit_ms) const {
  MutexLock lock(mutex_);
  size_t reached = 0;
  for (const auto& [cross_rank, f] : members_) {
    if (f->peerAddress() == lost || !f->stream.attached()) continue;
    if (now_ms - f->lastHeardMs() <= limit_ms) ++reached;
  }
  return reached;
}

int64_t FollowerStreams::heardAgeMs(int cross_rank, int64_t now_ms) const {
  MutexLock lock(mutex_);
  auto it = members_.find(cross_rank);
  return it == members_.end() ? -1 : now_ms - it->second->lastHeardMs();
}

int64_t FollowerStreams::silentMs(const Follower& follower, int64_t now_ms) const {
  MutexLock lock(mutex_);
  return now_ms - std::max(follower.lastHeardMs(), resumed_ms_);
}

std::vector<v1::NodeInfo> FollowerStreams::absentSinceTakeover(const std::vector<v1::NodeInfo>& members, int64_t now_ms,
                                                               int64_t limit_ms) const {
  MutexLock lock(mutex_);
  std::vector<v1::NodeInfo> absent;
  if (took_over_ms_ == 0 || now_ms - std::max(took_over_ms_, resumed_ms_) <= limit_ms) return absent;
  for (const auto& node : members) {
    if (node.cross_rank() != 0 && members_.count(node.cross_rank()) == 0) absent.push_back(node);
  }
  return absent;
}

FollowerStreams::Renumbered FollowerStreams::renumber(const membership::EpochBook& book) {
  MutexLock lock(mutex_);
  Renumbered result;
  std::map<int, std::shared_ptr<Follower>> members;
  for (auto& [cross_rank, f] : members_) {
    const v1::NodeInfo* member = book.member(f->peerAddress());
    if (member == nullptr) {
      std::string why = book.removedWhy(f->peerAddress());
      f->remove(why);
      result.removed.emplace_back(f, std::move(why));
      continue;
    }
    f->renumber(*member);
    members[member->cross_rank()] = f;
    result.kept.push_back(f);
  }
  // Candidates whose ranks this epoch admits are members now.
  for (auto it = candidates_.begin(); it != candidates_.end();) {
    const v1::NodeInfo* member = book.member(it->first);
    if (member == nullptr) {
      ++it;
      continue;
    }
    it->second->renumber(*member);
    members[member->cross_rank()] = it->second;
    result.kept.push_back(it->second);
    it = candidates_.erase(it);
  }
  members_ = std::move(members);
  return result;
}

}  // namespace gradsync::peer
