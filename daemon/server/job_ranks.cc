// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_ranks.h"

#include <algorithm>

namespace gradsync::server {

v1::DaemonMessage refusal(const std::string& cause) {
  v1::DaemonMessage message;
  message.mutable_membership_change()->set_refused(true);
  message.mutable_membership_change()->set_cause(cause);
  return message;
}

Status JobRanks::add(std::shared_ptr<Session> session) {
  auto [it, inserted] = sessions_.emplace(session->rank(), session);
  if (!inserted) {
    return alreadyExists("job '" + job_id_ + "': rank " + std::to_string(session->rank()) +
                         " is already connected as " + it->second->describe());
  }
  registered_.insert(session->rank());
  registered_local_.insert(session->identity().local_rank);
  return okStatus();
}

JobRanks::Left JobRanks::remove(const Session& session) {
  auto joiner = std::find_if(joiners_.begin(), joiners_.end(), [&](const auto& j) { return j.get() == &session; });
  if (joiner != joiners_.end()) {
    joiners_.erase(joiner);
    return reported_.erase(session.id()) > 0 ? Left::kReportedJoiner : Left::kJoiner;
  }
  auto it = sessions_.find(session.rank());
  if (it == sessions_.end() || it->second.get() != &session) return Left::kUnknown;
  sessions_.erase(it);
  return Left::kRank;
}

std::shared_ptr<Session> JobRanks::find(int rank) const {
  auto it = sessions_.find(rank);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<int> JobRanks::neverRegistered(int expected, bool by_rank) const {
  const std::set<int>& arrived = by_rank ? registered_ : registered_local_;
  std::vector<int> missing;
  for (int r = 0; r < expected; ++r) {
    if (!arrived.count(r)) missing.push_back(r);
  }
  return missing;
}

size_t JobRanks::readyJoinerCount() const {
  return std::count_if(joiners_.begin(), joiners_.end(), [](const auto& j) { return j->streamAttached(); });
}

std::vector<uint64_t> JobRanks::readyJoinerIds() const {
  std::vector<uint64_t> ids;
  for (const auto& joiner : joiners_) {
    if (joiner->streamAttached()) ids.push_back(joiner->id());
  }
  return ids;
}

int JobRanks::admitReadyJoiners() {
  int admitted = 0;
  for (auto it = joiners_.begin(); it != joiners_.end();) {
    if (!(*it)->streamAttached()) {  // a later chance takes it
      ++it;
      continue;
    }
    const int rank = sessions_.empty() ? 0 : sessions_.rbegin()->first + 1;  // after the ranks there are
    (*it)->renumber(rank);
    registered_.insert(rank);
    sessions_.emplace(rank, std::move(*it));
    it = joiners_.erase(it);
    ++admitted;
  }
  return admitted;
}

std::shared_ptr<Session> JobRanks::takeJoiner(uint64_t id) {
  auto it = std::find_if(joiners_.begin(), joiners_.end(), [&](const auto& j) { return j->id() == id; });
  if (it == joiners_.end()) return nullptr;
  std::shared_ptr<Session> joiner = std::move(*it);
  joiners_.erase(it);
  reported_.erase(id);
  return joiner;
}

JobRanks::Messages JobRanks::refuseJoiners(const std::string& cause) {
  Messages refused;
  for (auto& joiner : joiners_) {
    refused.emplace_back(std::move(joiner), refusal("job '" + job_id_ + "' takes no new rank: " + cause));
  }
  joiners_.clear();
  return refused;
}

std::vector<std::shared_ptr<Session>> JobRanks::unreportedJoiners(uint64_t leader_changes) {
  if (leader_changes != leader_changes_seen_) {
    leader_changes_seen_ = leader_changes;
    reported_.clear();
  }
  std::vector<std::shared_ptr<Session>> ready;
  for (const auto& joiner : joiners_) {
    if (joiner->streamAttached() && reported_.insert(joiner->id()).second) ready.push_back(joiner);
  }
  return ready;
}

JobRanks::Messages JobRanks::renumber(uint64_t epoch, const std::vector<int>& survivors, const Admitted& admitted,
                                      const std::string& cause) {
  Messages left_out;
  ByRank renumbered;
  for (const auto& [rank, session] : sessions_) {
    auto at = std::lower_bound(survivors.begin(), survivors.end(), rank);
    if (at == survivors.end() || *at != rank) {
      left_out.emplace_back(session, refusal("job '" + job_id_ + "' left " + session->describe() + " out of epoch " +
                                             std::to_string(epoch) + ": " + cause));
      continue;
    }
    const int new_rank = static_cast<int>(at - survivors.begin());
    session->renumber(new_rank);
    renumbered.emplace(new_rank, session);
  }
  for (const auto& [rank, session] : admitted) {
    session->renumber(rank);
    renumbered.emplace(rank, session);
  }
  sessions_ = std::move(renumbered);
  registered_.clear();
  for (const auto& [rank, session] : sessions_) registered_.insert(rank);
  return left_out;
}

JobRanks::Messages JobRanks::places(uint64_t epoch, int size, const std::string& cause) const {
  Messages messages;
  int local_rank = 0;  // this node's ranks in rank order
  for (const auto& [rank, session] : sessions_) {
    v1::DaemonMessage message;
    v1::MembershipChange* change = message.mutable_membership_change();
    change->set_epoch(epoch);
    change->set_rank(rank);
    change->set_size(size);
    change->set_local_rank(local_rank++);
    change->set_local_size(static_cast<int>(sessions_.size()));
    change->set_cause(cause);
    messages.emplace_back(session, std::move(message));
  }
  return messages;
}

JobRanks::Messages JobRanks::refuseRanks(const std::string& cause) const {
  Messages refused;
  for (const auto& [rank, session] : sessions_)
    refused.emplace_back(session, refusal("job '" + job_id_ + "': " + cause));
  return refused;
}

}  // namespace gradsync::server
