// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/steady_state.h"

#include <iterator>

namespace gradsync::server {

void SteadyState::learn(uint64_t id, coordinator::Response response, std::set<int> local) {
  Entry& entry = entries_[id];
  if (!local.empty()) {
    const coordinator::Request& first = response.first();
    entry.group_id = first.group_id;
    entry.group_size = first.group_size;
    if (entry.group_id != 0) groups_[entry.group_id].insert(id);
  }
  entry.local.clear();
  for (size_t i = 0; i < response.ranks.size(); ++i) {
    if (local.count(response.ranks[i])) entry.local[response.ranks[i]] = i;
  }
  entry.response = std::move(response);
}

bool SteadyState::canHold(uint64_t id, int rank) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.local.count(rank) > 0;
}

bool SteadyState::hold(uint64_t id, Held held) {
  Entry& entry = entries_.at(id);
  const int rank = held.request.rank;
  held_names_.emplace(std::make_pair(rank, held.request.name), id);
  entry.held[rank].push_back(std::move(held));
  ++held_count_;
  if (!isReady(id)) return false;
  return entry.group_id == 0 || groupReady(entry.group_id, entry.group_size);
}

bool SteadyState::holds(int rank, const std::string& name) const {
  return held_names_.count(std::make_pair(rank, name)) > 0;
}

bool SteadyState::isReady(uint64_t id) const {
  auto entry = entries_.find(id);
  if (entry == entries_.end() || entry->second.local.empty()) return false;
  for (const auto& [rank, index] : entry->second.local) {
    auto it = entry->second.held.find(rank);
    if (it == entry->second.held.end() || it->second.empty()) return false;
  }
  return true;
}

// The members' names differ (a rank holds one request per name), so as
// many ready versions as members are the whole group.
bool SteadyState::groupReady(uint64_t group_id, uint32_t group_size) const {
  auto group = groups_.find(group_id);
  if (group == groups_.end()) return false;
  uint32_t ready = 0;
  for (uint64_t id : group->second) ready += isReady(id) ? 1 : 0;
  return ready == group_size;
}

std::vector<uint64_t> SteadyState::ready() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, entry] : entries_) {
    if (!entry.held.empty() && isReady(id) && (entry.group_id == 0 || groupReady(entry.group_id, entry.group_size))) {
      ids.push_back(id);
    }
  }
  return ids;
}

std::vector<uint64_t> SteadyState::runnable(const std::vector<uint64_t>& agreed) const {
  std::map<uint64_t, uint32_t> agreed_members;  // group id -> its members among `agreed`
  for (uint64_t id : agreed) {
    auto entry = entries_.find(id);
    if (entry != entries_.end() && entry->second.group_id != 0) ++agreed_members[entry->second.group_id];
  }
  std::vector<uint64_t> ids;
  for (uint64_t id : agreed) {
    auto entry = entries_.find(id);
    if (entry == entries_.end()) continue;
    if (entry->second.group_id != 0 && agreed_members[entry->second.group_id] != entry->second.group_size) continue;
    ids.push_back(id);
  }
  return ids;
}

coordinator::Response SteadyState::take(uint64_t id) {
  Entry& entry = entries_.at(id);
  // A copy shares the other ranks' requests (O(this node's ranks)).
  coordinator::Response response = entry.response;
  for (auto& [rank, requests] : entry.held) {
    auto index = entry.local.find(rank);  // always there: only local ranks hold
    if (requests.empty() || index == entry.local.end()) continue;
    Held& oldest = requests.front();
    forget(id, oldest.request);
    response.requests.set(index->second, std::move(oldest.request));
    requests.pop_front();
    --held_count_;
  }
  return response;
}

void SteadyState::forget(uint64_t id, const coordinator::Request& request) {
  auto name = held_names_.equal_range(std::make_pair(request.rank, request.name));
  for (auto n = name.first; n != name.second; ++n) {
    if (n->second == id) {
      held_names_.erase(n);
      return;
    }
  }
}

void SteadyState::release(uint64_t id, Entry& entry, Clock::time_point cutoff, std::vector<Held>* out) {
  for (auto& [rank, queue] : entry.held) {
    while (!queue.empty() && queue.front().since < cutoff) {
      forget(id, queue.front().request);
      out->push_back(std::move(queue.front()));
      queue.pop_front();
      --held_count_;
    }
  }
}

std::vector<SteadyState::Held> SteadyState::takeOlderThan(Clock::time_point cutoff) {
  std::vector<Held> out;
  std::set<uint64_t> groups;  // of the requests released
  for (auto& [id, entry] : entries_) {
    const size_t before = out.size();
    release(id, entry, cutoff, &out);
    if (out.size() > before && entry.group_id != 0) groups.insert(entry.group_id);
  }
  // The rest of their groups: the leader negotiates a group whole.
  for (uint64_t group : groups) {
    auto rest = takeGroup(group);
    std::move(rest.begin(), rest.end(), std::back_inserter(out));
  }
  return out;
}

std::vector<SteadyState::Held> SteadyState::takeGroup(uint64_t group_id) {
  std::vector<Held> out;
  auto group = groups_.find(group_id);
  if (group == groups_.end()) return out;
  for (uint64_t id : group->second) release(id, entries_.at(id), Clock::time_point::max(), &out);
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
