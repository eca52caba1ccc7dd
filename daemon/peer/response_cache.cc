// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/response_cache.h"

#include <sstream>

namespace gradsync::peer {

std::string ResponseCache::signature(const coordinator::Request& r) {
  std::ostringstream s;
  s << r.rank << '|' << r.name << '|' << r.type << '|' << r.dtype << '|' << r.op << '|' << r.prescale << '|'
    << r.postscale << '|' << r.root_rank << '|' << r.process_set_id << '|' << r.length << '|' << r.group_id << '/'
    << r.group_size << '|' << (r.onCuda() ? "cuda" : "cpu") << (r.cuda_output ? "+output" : "") << '|';
  for (int64_t d : r.shape) s << d << ',';
  s << '|';
  for (int64_t x : r.splits) s << x << ',';
  s << '|' << r.target_set << '|';
  for (int x : r.set_ranks) s << x << ',';
  return s.str();
}

std::string ResponseCache::signature(const coordinator::Response& response) {
  std::string s = response.name + "#" + std::to_string(response.process_set_id) + "#";
  for (size_t i = 0; i < response.requests.size(); ++i) {
    s += response.requests[i] ? signature(*response.requests[i]) : "joined:" + std::to_string(response.ranks[i]);
    s += "#";
  }
  return s;
}

std::pair<uint64_t, bool> ResponseCache::assign(const coordinator::Response& response) {
  // Process set changes carry the set's id, which a cache id would not.
  if (!response.status.isOk() || changesProcessSets(response.type)) return {0, false};
  // A barrier carries no data to describe, and each unnamed one has a name
  // of its own ("barrier.N"): cached, they would fill the cache for nothing.
  if (response.type == v1::BARRIER) return {0, false};
  // JOIN carries the rank that joined last, which a cache id would not.
  if (response.type == v1::JOIN) return {0, false};
  const std::string key = signature(response);
  auto it = by_signature_.find(key);
  if (it != by_signature_.end()) return {it->second, false};
  if (responses_.size() >= capacity_) return {0, false};
  const uint64_t id = next_id_++;
  by_signature_.emplace(key, id);
  remember(id, response);
  return {id, true};
}

void ResponseCache::clear() {
  by_signature_.clear();
  responses_.clear();
  by_request_.clear();
}

void ResponseCache::remember(uint64_t id, const coordinator::Response& response) {
  if (id == 0 || responses_.size() >= capacity_) return;
  responses_[id] = response;
  for (const auto& request : response.requests) {
    if (request) by_request_[signature(*request)] = id;
  }
}

const coordinator::Response* ResponseCache::find(uint64_t id) const {
  auto it = responses_.find(id);
  return it == responses_.end() ? nullptr : &it->second;
}

uint64_t ResponseCache::idFor(const coordinator::Request& request) const {
  if (!request.abandoned.empty()) return 0;
  auto it = by_request_.find(signature(request));
  return it == by_request_.end() ? 0 : it->second;
}

}  // namespace gradsync::peer
