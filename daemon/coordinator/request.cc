// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/request.h"

#include <algorithm>
#include <atomic>

namespace gradsync::coordinator {

namespace {
bool byIndex(const std::pair<size_t, RequestList::Entry>& change, size_t i) { return change.first < i; }
}  // namespace

const RequestList::Entry* RequestList::changedAt(size_t i) const {
  auto it = std::lower_bound(changed_.begin(), changed_.end(), i, byIndex);
  return it != changed_.end() && it->first == i ? &it->second : nullptr;
}

RequestList::Entry& RequestList::mutableAt(size_t i) {
  auto it = std::lower_bound(changed_.begin(), changed_.end(), i, byIndex);
  if (it != changed_.end() && it->first == i) return it->second;
  // A list no other copy shares changes in place (a copy holding it could
  // only come from this one, which is being changed, so no other thread can
  // be taking one now).
  if (base_.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);  // after the last reads of a copy gone
    return (*base_)[i];
  }
  return changed_.insert(it, {i, (*base_)[i]})->second;
}

std::vector<RequestList::Entry>& RequestList::own() {
  if (!base_) {
    base_ = std::make_shared<std::vector<Entry>>();
  } else if (base_.use_count() > 1) {
    base_ = std::make_shared<std::vector<Entry>>(*base_);
  } else {
    std::atomic_thread_fence(std::memory_order_acquire);  // as in mutableAt
  }
  for (auto& [i, entry] : changed_) (*base_)[i] = std::move(entry);
  changed_.clear();
  return *base_;
}

const Request& Response::first() const {
  for (const auto& r : requests) {
    if (r) return *r;
  }
  static const Request kEmpty;  // unreachable in practice: a response has a request
  return kEmpty;
}

uint64_t Response::repeatedId() const {
  if (repeats != 0) return repeats;
  const uint64_t id = requests.empty() || !requests[0] ? 0 : requests[0]->repeats;
  if (id == 0) return 0;
  for (const auto& r : requests) {
    if (!r || r->repeats != id) return 0;
  }
  return id;
}

std::optional<size_t> Response::indexOf(int rank) const {
  if (rank >= 0 && static_cast<size_t>(rank) < ranks.size() && ranks[rank] == rank) return rank;
  auto at = std::lower_bound(ranks.begin(), ranks.end(), rank);
  if (at == ranks.end() || *at != rank) at = std::find(ranks.begin(), ranks.end(), rank);
  if (at == ranks.end()) return std::nullopt;
  return at - ranks.begin();
}

Request repeatedRequest(const Response& cached, size_t index, uint64_t id, uint64_t call) {
  Request request = *cached.requests[index];  // (present: checked by whoever names it)
  request.handle = 0;
  request.offset = 0;
  request.call = call;
  request.repeats = id;
  request.received = {};
  return request;
}

Request Repeat::request(size_t i) const { return repeatedRequest(*cached, *cached->indexOf(ranks[i]), id, call); }

int Response::activeCount() const {
  int n = 0;
  for (const auto& r : requests) n += r.has_value();
  return n;
}

std::string ranksString(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace gradsync::coordinator
