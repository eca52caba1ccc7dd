// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/coordination_codec.h"

#include <algorithm>
#include <optional>

#include "daemon/coordinator/request_wire.h"

namespace gradsync::peer {
namespace {

// The index of `rank`'s request in `response`, or nothing (not there, or
// joined): ranks are in increasing order (a process set's members), so a
// binary search finds it.
std::optional<size_t> indexOfRank(const coordinator::Response& response, int rank) {
  const std::optional<size_t> at = response.indexOf(rank);
  if (!at || !response.requests[*at]) return std::nullopt;
  return at;
}

}  // namespace

CoordinationCodec::CoordinationCodec(std::string job_id, size_t cache_capacity)
    : job_id_(std::move(job_id)), cache_(cache_capacity) {}

v1::NegotiatedResponse CoordinationCodec::encode(const coordinator::Response& response) {
  std::pair<uint64_t, bool> id;
  {
    MutexLock lock(mutex_);
    id = cache_.assign(response);
  }
  if (id.first == 0 && isPlainBarrier(response)) {
    v1::NegotiatedResponse barrier;
    barrier.set_name(response.name);
    barrier.set_type(response.type);
    barrier.set_process_set_id(response.process_set_id);
    barrier.set_own_ranks(true);
    barrier.set_admits_joiners(response.admits_joiners);
    return barrier;
  }
  if (id.first == 0 || id.second) {
    std::optional<v1::NegotiatedResponse> uniform = uniformForm(response);
    v1::NegotiatedResponse full = uniform ? std::move(*uniform) : toProto(response);
    full.set_cache_id(id.first);
    return full;
  }
  // The id alone: which ranks took part is in the cached metadata, and each
  // follower knows its own ranks' handles and offsets (decode).
  cache_hits_.fetch_add(1);
  v1::NegotiatedResponse cached;
  cached.set_cache_id(id.first);
  cached.set_cached(true);
  cached.set_admits_joiners(response.admits_joiners);
  return cached;
}

StatusOr<coordinator::Response> CoordinationCodec::decode(const v1::NegotiatedResponse& in) {
  MutexLock lock(mutex_);
  if (in.own_ranks()) return ownBarrierLocked(in);
  if (in.uniform()) {
    ASSIGN_OR_RETURN(coordinator::Response response, fromUniformLocked(in));
    cache_.remember(in.cache_id(), response);
    applyForwardedLocked(&response);
    return response;
  }
  if (!in.cached()) {
    coordinator::Response response = fromProto(in);
    cache_.remember(in.cache_id(), response);
    // This node's ranks' requests that went by cache id reached the leader
    // without their handles and offsets (it keeps the cached ones).
    applyForwardedLocked(&response);
    return response;
  }
  const coordinator::Response* base = cache_.find(in.cache_id());
  const bool per_rank = in.requests_size() > 0;  // a leader before the id-only form
  if (base == nullptr || (per_rank && static_cast<int>(base->requests.size()) != in.requests_size())) {
    return dataLoss("job '" + job_id_ + "': the leader referred to unknown cached response " +
                    std::to_string(in.cache_id()));
  }
  cache_hits_.fetch_add(1);
  coordinator::Response response = *base;
  response.admits_joiners = in.admits_joiners();
  // Other nodes' ranks keep the cached handles and offsets (only used
  // where they run).
  applyForwardedLocked(&response);
  for (int i = 0; i < in.requests_size(); ++i) {
    if (!response.requests[i]) continue;
    auto& request = response.requests.mutableAt(i);
    request->handle = in.requests(i).handle();
    request->offset = in.requests(i).offset();
  }
  return response;
}

CoordinationCodec::Forwarded CoordinationCodec::Forwarded::of(const coordinator::Request& request) {
  return {request.rank, request.handle, request.offset, request.cuda, request.cuda_output, request.output_length};
}

void CoordinationCodec::Forwarded::applyTo(coordinator::Request* request) const {
  request->handle = handle;
  request->offset = offset;
  request->cuda = cuda;
  request->cuda_output = cuda_output;
  request->output_length = output_length;
}

void CoordinationCodec::applyForwardedLocked(coordinator::Response* response) {
  auto mine = forwarded_.find(response->name);
  if (mine == forwarded_.end()) return;
  // Those of ranks the response answers are forgotten; others (a
  // response for one rank: an error) wait for their own.
  std::vector<Forwarded>& forwarded = mine->second;
  forwarded.erase(std::remove_if(forwarded.begin(), forwarded.end(),
                                 [&](const Forwarded& f) {
                                   const auto i = indexOfRank(*response, f.rank);
                                   if (i) f.applyTo(&*response->requests.mutableAt(*i));
                                   return i.has_value();
                                 }),
                  forwarded.end());
  if (forwarded.empty()) forwarded_.erase(mine);
}

namespace {
// A request's metadata: what must match across ranks for the uniform form.
// Where its data lies is each rank's own (a CUDA tensor stays one: its
// references are emptied, not removed).
v1::Enqueue metadataOf(const coordinator::Request& request) {
  v1::Enqueue e = coordinator::enqueueOf(request);
  e.clear_handle();
  e.clear_offset();
  e.clear_call();
  if (e.has_cuda()) e.mutable_cuda()->Clear();
  if (e.has_cuda_output()) e.mutable_cuda_output()->Clear();
  e.clear_output_length();
  return e;
}
}  // namespace

std::optional<v1::NegotiatedResponse> CoordinationCodec::uniformForm(const coordinator::Response& response) {
  if (!response.status.isOk() || response.requests.empty() || response.changed_process_set != 0) return std::nullopt;
  if (response.type == v1::ALLGATHER || response.type == v1::ALLTOALL) return std::nullopt;  // sizes per rank
  if (!response.requests[0]) return std::nullopt;
  const v1::Enqueue first = metadataOf(*response.requests[0]);
  const std::string wanted = first.SerializeAsString();
  bool contiguous = true;
  for (size_t i = 1; i < response.requests.size(); ++i) {
    if (!response.requests[i] || metadataOf(*response.requests[i]).SerializeAsString() != wanted) return std::nullopt;
    contiguous = contiguous && response.ranks[i] == response.ranks[i - 1] + 1;
  }
  v1::NegotiatedResponse out;
  out.set_name(response.name);
  out.set_type(response.type);
  out.set_process_set_id(response.process_set_id);
  out.set_last_joined_rank(response.last_joined_rank);
  out.set_admits_joiners(response.admits_joiners);
  out.set_uniform(true);
  auto* r = out.add_requests();
  r->set_rank(response.ranks[0]);
  r->set_present(true);
  *r->mutable_enqueue() = first;
  if (contiguous) {
    out.set_uniform_first(response.ranks.front());
    out.set_uniform_count(static_cast<int>(response.ranks.size()));
  } else {
    for (int rank : response.ranks) out.add_uniform_ranks(rank);
  }
  return out;
}

StatusOr<coordinator::Response> CoordinationCodec::fromUniformLocked(const v1::NegotiatedResponse& in) {
  // Ranks number at most this many (a job of 4M ranks); the leader's word is
  // checked before anything is sized by it.
  constexpr int kMaxRanks = 1 << 22;
  if (in.requests_size() != 1 || in.uniform_count() < 0 || in.uniform_count() > kMaxRanks || in.uniform_first() < 0 ||
      in.uniform_first() > kMaxRanks - in.uniform_count()) {
    return dataLoss("job '" + job_id_ + "': the leader's response '" + in.name() + "' names no sane set of ranks");
  }
  coordinator::Response response;
  response.name = in.name();
  response.type = in.type();
  response.process_set_id = in.process_set_id();
  response.last_joined_rank = in.last_joined_rank();
  response.admits_joiners = in.admits_joiners();
  if (in.uniform_ranks_size() > 0) {
    response.ranks.assign(in.uniform_ranks().begin(), in.uniform_ranks().end());
  } else {
    for (int i = 0; i < in.uniform_count(); ++i) response.ranks.push_back(in.uniform_first() + i);
  }
  const v1::Enqueue& first = in.requests(0).enqueue();
  response.requests.reserve(response.ranks.size());
  for (int rank : response.ranks) response.requests.emplace_back(coordinator::requestOf(rank, first));
  return response;
}

bool CoordinationCodec::isPlainBarrier(const coordinator::Response& response) {
  if (response.type != v1::BARRIER || !response.status.isOk()) return false;
  return std::none_of(response.requests.begin(), response.requests.end(),
                      [](const auto& request) { return request && request->commit; });
}

coordinator::Response CoordinationCodec::ownBarrierLocked(const v1::NegotiatedResponse& in) {
  coordinator::Response response;
  response.name = in.name();
  response.type = v1::BARRIER;
  response.process_set_id = in.process_set_id();
  response.admits_joiners = in.admits_joiners();
  auto mine = forwarded_.find(in.name());
  if (mine == forwarded_.end()) return response;  // none of this node's ranks took part
  std::vector<Forwarded> forwarded = std::move(mine->second);
  forwarded_.erase(mine);
  std::sort(forwarded.begin(), forwarded.end(), [](const Forwarded& a, const Forwarded& b) { return a.rank < b.rank; });
  for (const Forwarded& f : forwarded) {
    coordinator::Request request;
    request.rank = f.rank;
    request.name = in.name();
    request.type = v1::BARRIER;
    request.process_set_id = in.process_set_id();
    f.applyTo(&request);
    response.ranks.push_back(f.rank);
    response.requests.push_back(std::move(request));
  }
  return response;
}

v1::FollowerMessage::Request CoordinationCodec::compact(int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
  v1::FollowerMessage::Request request;
  request.set_rank(rank);
  request.set_epoch(epoch);
  const coordinator::Request metadata = coordinator::requestOf(rank, enqueue);
  uint64_t id = 0;
  {
    MutexLock lock(mutex_);
    auto& same_name = forwarded_[enqueue.name()];
    same_name.erase(std::remove_if(same_name.begin(), same_name.end(),
                                   [rank](const Forwarded& f) { return f.rank == rank; }),  // an earlier step's
                    same_name.end());
    same_name.push_back(Forwarded::of(metadata));
    id = cache_.idFor(metadata);
  }
  if (id != 0) {
    cache_hits_.fetch_add(1);
    request.set_cache_id(id);
    request.set_handle(enqueue.handle());
    request.set_offset(enqueue.offset());
    request.set_call(enqueue.call());
  } else {
    *request.mutable_enqueue() = enqueue;
  }
  return request;
}

StatusOr<v1::Enqueue> CoordinationCodec::expand(const v1::FollowerMessage::Request& in) {
  if (in.cache_id() == 0) return in.enqueue();
  ASSIGN_OR_RETURN(const coordinator::Repeat repeat, expandRepeat(in));
  coordinator::Request request = repeat.request(0);
  request.handle = in.handle();
  request.offset = in.offset();
  return coordinator::enqueueOf(request);
}

StatusOr<coordinator::Repeat> CoordinationCodec::expandRepeat(const v1::FollowerMessage::Request& in) {
  coordinator::Repeat repeat;
  repeat.id = in.cache_id();
  repeat.call = in.call();
  repeat.ranks.reserve(1 + in.same_ranks_size());
  repeat.ranks.push_back(in.rank());
  repeat.ranks.insert(repeat.ranks.end(), in.same_ranks().begin(), in.same_ranks().end());
  MutexLock lock(mutex_);
  repeat.cached = cache_.shared(in.cache_id());
  for (int rank : repeat.ranks) {
    if (repeat.cached == nullptr || !indexOfRank(*repeat.cached, rank)) {
      return dataLoss("job '" + job_id_ + "': a follower referred to unknown cached request " +
                      std::to_string(in.cache_id()) + " of rank " + std::to_string(rank));
    }
  }
  cache_hits_.fetch_add(repeat.ranks.size());
  return repeat;
}

uint64_t CoordinationCodec::cachedId(const coordinator::Request& request) const {
  MutexLock lock(mutex_);
  return cache_.idFor(request);
}

std::optional<coordinator::Response> CoordinationCodec::cachedResponse(uint64_t id) const {
  MutexLock lock(mutex_);
  const coordinator::Response* response = cache_.find(id);
  if (response == nullptr) return std::nullopt;
  return *response;
}

void CoordinationCodec::clear() {
  MutexLock lock(mutex_);
  cache_.clear();
  forwarded_.clear();
}

void CoordinationCodec::countSent(size_t bytes) {
  bytes_sent_.fetch_add(bytes);
  messages_.fetch_add(1);
  noteSize(bytes);
}

void CoordinationCodec::countReceived(size_t bytes) {
  bytes_received_.fetch_add(bytes);
  messages_.fetch_add(1);
  noteSize(bytes);
}

void CoordinationCodec::noteSize(size_t bytes) {
  uint64_t largest = largest_message_.load();
  while (bytes > largest && !largest_message_.compare_exchange_weak(largest, bytes)) {
  }
}

CoordinationCodec::Traffic CoordinationCodec::traffic() const {
  return {bytes_sent_.load(), bytes_received_.load(), messages_.load(), cache_hits_.load(), largest_message_.load()};
}

v1::NegotiatedResponse toProto(const coordinator::Response& response) {
  v1::NegotiatedResponse out;
  out.set_name(response.name);
  out.set_type(response.type);
  out.set_process_set_id(response.process_set_id);
  for (size_t i = 0; i < response.ranks.size(); ++i) {
    auto* r = out.add_requests();  // (NegotiatedResponse.ranks repeats the requests' ranks: not sent)
    r->set_rank(response.ranks[i]);
    r->set_present(response.requests[i].has_value());
    if (response.requests[i]) *r->mutable_enqueue() = coordinator::enqueueOf(*response.requests[i]);
  }
  out.set_code(static_cast<int>(response.status.code()));
  out.set_message(response.status.message());
  out.set_last_joined_rank(response.last_joined_rank);
  out.set_changed_process_set(response.changed_process_set);
  out.set_admits_joiners(response.admits_joiners);
  return out;
}

coordinator::Response fromProto(const v1::NegotiatedResponse& in) {
  coordinator::Response out;
  out.name = in.name();
  out.type = in.type();
  out.process_set_id = in.process_set_id();
  for (const auto& r : in.requests()) {
    out.ranks.push_back(r.rank());
    if (r.present()) {
      out.requests.push_back(coordinator::requestOf(r.rank(), r.enqueue()));
    } else {
      out.requests.emplace_back();
    }
  }
  out.status = Status(static_cast<StatusCode>(in.code()), in.message());
  out.last_joined_rank = in.last_joined_rank();
  out.changed_process_set = in.changed_process_set();
  out.admits_joiners = in.admits_joiners();
  return out;
}

}  // namespace gradsync::peer
