// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/response_cache.h"

#include <algorithm>
#include <sstream>

namespace gradsync::peer {

std::string ResponseCache::signature(const coordinator::Request& r) {
  return std::to_string(r.rank) + '|' + metadataSignature(r);
}

std::string ResponseCache::metadataSignature(const coordinator::Request& r) {
  std::ostringstream s;
  s << std::hexfloat;  // scales exactly, not to 6 digits
  s << r.name << '|' << r.type << '|' << r.dtype << '|' << r.op << '|' << r.prescale << '|' << r.postscale << '|'
    << r.root_rank << '|' << r.process_set_id << '|' << r.length << '|' << r.group_id << '/' << r.group_size << '|'
    << (r.onCuda() ? "cuda" : "cpu") << (r.cuda_output ? "+output" : "") << '|';
  for (int64_t d : r.shape) s << d << ',';
  s << '|';
  for (int64_t x : r.splits) s << x << ',';
  s << '|' << r.target_set << '|';
  for (int x : r.set_ranks) s << x << ',';
  return s.str();
}

bool ResponseCache::sameMetadata(const coordinator::Request& a, const coordinator::Request& b) {
  return a.name == b.name && a.type == b.type && a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.root_rank == b.root_rank && a.process_set_id == b.process_set_id &&
         a.length == b.length && a.group_id == b.group_id && a.group_size == b.group_size && a.onCuda() == b.onCuda() &&
         a.cuda_output.has_value() == b.cuda_output.has_value() && a.shape == b.shape && a.splits == b.splits &&
         a.target_set == b.target_set && a.set_ranks == b.set_ranks;
}

bool ResponseCache::uniform(const coordinator::Response& response) {
  if (response.requests.empty() || !response.requests[0]) return false;
  const coordinator::Request& first = *response.requests[0];
  for (size_t i = 0; i < response.requests.size(); ++i) {
    const auto& request = response.requests[i];
    if (!request || request->rank != response.ranks[i] || (i > 0 && !sameMetadata(first, *request))) return false;
  }
  return true;
}

std::string ResponseCache::signature(const coordinator::Response& response) {
  std::string s = response.name + "#" + std::to_string(response.process_set_id) + "#";
  if (uniform(response)) {
    s += "uniform#" + metadataSignature(*response.requests[0]) + "#";
    for (int rank : response.ranks) s += std::to_string(rank) + ",";
    return s;
  }
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
  if (const uint64_t id = repeated(response)) return {id, false};
  const std::string key = signature(response);
  auto it = by_signature_.find(key);
  if (it != by_signature_.end()) return {it->second, false};
  if (responses_.size() >= capacity_) return {0, false};
  const uint64_t id = next_id_++;
  by_signature_.emplace(key, id);
  remember(id, response);
  return {id, true};
}

uint64_t ResponseCache::repeated(const coordinator::Response& response) const {
  const uint64_t id = response.repeatedId();
  if (id == 0) return 0;
  const coordinator::Response* cached = find(id);
  if (cached == nullptr || cached->name != response.name || cached->ranks != response.ranks) return 0;
  return id;
}

void ResponseCache::clear() {
  by_signature_.clear();
  responses_.clear();
  by_metadata_.clear();
  by_request_.clear();
}

void ResponseCache::remember(uint64_t id, const coordinator::Response& response) {
  if (id == 0 || responses_.size() >= capacity_) return;
  auto stored = std::make_shared<coordinator::Response>(response);
  stored->repeats = 0;  // (of another cached response, if any)
  responses_[id] = std::move(stored);
  if (uniform(response)) {
    RankedId entry{response.ranks, id};
    std::sort(entry.ranks.begin(), entry.ranks.end());
    auto& same = by_metadata_[metadataSignature(*response.requests[0])];
    same.erase(std::remove_if(same.begin(), same.end(), [&](const RankedId& e) { return e.ranks == entry.ranks; }),
               same.end());
    same.push_back(std::move(entry));
    return;
  }
  for (const auto& request : response.requests) {
    if (request) by_request_[signature(*request)] = id;
  }
}

const coordinator::Response* ResponseCache::find(uint64_t id) const {
  auto it = responses_.find(id);
  return it == responses_.end() ? nullptr : it->second.get();
}

std::shared_ptr<const coordinator::Response> ResponseCache::shared(uint64_t id) const {
  auto it = responses_.find(id);
  return it == responses_.end() ? nullptr : it->second;
}

uint64_t ResponseCache::idFor(const coordinator::Request& request) const {
  if (!request.abandoned.empty()) return 0;
  const std::string metadata = metadataSignature(request);
  if (auto it = by_metadata_.find(metadata); it != by_metadata_.end()) {
    // The latest response holding this rank (a later one replaced it).
    for (auto e = it->second.rbegin(); e != it->second.rend(); ++e) {
      if (std::binary_search(e->ranks.begin(), e->ranks.end(), request.rank)) return e->id;
    }
  }
  if (by_request_.empty()) return 0;
  auto it = by_request_.find(std::to_string(request.rank) + '|' + metadata);
  return it == by_request_.end() ? 0 : it->second;
}

}  // namespace gradsync::peer
