// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/steady_state.h"

namespace gradsync::server {

void SteadyState::learn(uint64_t id, coordinator::Response response, std::set<int> local) {
  Entry& entry = entries_[id];
  entry.response = std::move(response);
  entry.local = std::move(local);
}

bool SteadyState::canHold(uint64_t id, int rank) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.local.count(rank) > 0;
}

void SteadyState::hold(uint64_t id, Held held) {
  Entry& entry = entries_.at(id);
  const int rank = held.request.rank;
  entry.held[rank].push_back(std::move(held));
  ++held_count_;
}

bool SteadyState::holds(int rank, const std::string& name) const {
  for (const auto& [id, entry] : entries_) {
    auto it = entry.held.find(rank);
    if (it == entry.held.end()) continue;
    for (const auto& h : it->second) {
      if (h.request.name == name) return true;
    }
  }
  return false;
}

bool SteadyState::isReady(uint64_t id) const {
  auto entry = entries_.find(id);
  if (entry == entries_.end() || entry->second.local.empty()) return false;
  for (int rank : entry->second.local) {
    auto it = entry->second.held.find(rank);
    if (it == entry->second.held.end() || it->second.empty()) return false;
  }
  return true;
}

std::vector<uint64_t> SteadyState::ready() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, entry] : entries_) {
    if (isReady(id)) ids.push_back(id);
  }
  return ids;
}

coordinator::Response SteadyState::take(uint64_t id) {
  Entry& entry = entries_.at(id);
  coordinator::Response response = entry.response;
  for (size_t i = 0; i < response.ranks.size(); ++i) {
    auto it = entry.held.find(response.ranks[i]);
    if (it == entry.held.end() || it->second.empty()) continue;
    response.requests[i] = std::move(it->second.front().request);
    it->second.pop_front();
    --held_count_;
  }
  return response;
}

std::vector<SteadyState::Held> SteadyState::takeOlderThan(Clock::time_point cutoff) {
  std::vector<Held> out;
  for (auto& [id, entry] : entries_) {
    for (auto& [rank, queue] : entry.held) {
      while (!queue.empty() && queue.front().since < cutoff) {
        out.push_back(std::move(queue.front()));
        queue.pop_front();
        --held_count_;
      }
    }
  }
  return out;
}

std::vector<SteadyState::Held> SteadyState::takeAll() { return takeOlderThan(Clock::time_point::max()); }

std::optional<SteadyState::Clock::time_point> SteadyState::oldest() const {
  std::optional<Clock::time_point> oldest;
  for (const auto& [id, entry] : entries_) {
    for (const auto& [rank, queue] : entry.held) {
      if (!queue.empty() && (!oldest || queue.front().since < *oldest)) oldest = queue.front().since;
    }
  }
  return oldest;
}

}  // namespace gradsync::server
