// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/negotiator.h"

#include <algorithm>

#include "daemon/coordinator/agreement.h"

namespace gradsync::coordinator {
Negotiator::Negotiator(std::string job_id, int size, std::vector<std::vector<int>> process_sets)
    : job_id_(std::move(job_id)), sets_(size, std::move(process_sets)) {}

std::optional<size_t> Negotiator::slotOf(const Entry& entry, int rank) const {
  const std::vector<int>& members = membersOf(entry.process_set_id);
  auto at = std::lower_bound(members.begin(), members.end(), rank);
  if (at == members.end() || *at != rank) return std::nullopt;
  return at - members.begin();
}

bool Negotiator::has(const Entry& entry, int rank) const {
  if (auto slot = slotOf(entry, rank); slot && entry.slots[*slot] != Entry::Slot::kEmpty) return true;
  return std::any_of(entry.outside.begin(), entry.outside.end(), [&](const Request& r) { return r.rank == rank; });
}

Request Negotiator::Entry::at(size_t slot) const {
  if (slots[slot] == Slot::kRepeated) return repeatedRequest(*repeated, slot, repeated_id, call);
  if (!dense.empty()) return *dense[slot];
  for (const auto& [i, request] : given) {
    if (i == slot) return request;
  }
  return Request{};  // (unreachable: an empty slot is never asked for)
}

Request Negotiator::Entry::lowest() const {
  std::optional<Request> found;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] != Slot::kEmpty) {
      found = at(i);
      break;
    }
  }
  for (const Request& r : outside) {
    if (!found || r.rank < found->rank) found = r;
  }
  return found.value_or(Request{});
}

std::vector<Request> Negotiator::Entry::takeInRankOrder() {
  std::vector<Request> out;
  out.reserve(submitted + outside.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] == Slot::kRepeated) out.push_back(at(i));
  }
  for (auto& [slot, request] : given) out.push_back(std::move(request));
  for (auto& request : dense) {
    if (request) out.push_back(std::move(*request));
  }
  for (Request& r : outside) out.push_back(std::move(r));
  std::sort(out.begin(), out.end(), [](const Request& a, const Request& b) { return a.rank < b.rank; });
  slots.clear();
  given.clear();
  dense.clear();
  outside.clear();
  submitted = 0;
  return out;
}

Negotiator::Entry Negotiator::newEntry(int process_set_id, Clock::time_point now) const {
  Entry entry;
  entry.process_set_id = process_set_id;
  entry.slots.assign(membersOf(process_set_id).size(), Entry::Slot::kEmpty);
  entry.first_seen = now;
  return entry;
}

Negotiator::Table::iterator Negotiator::addEntry(const std::string& name, int process_set_id, uint64_t call,
                                                 Clock::time_point now) {
  Entry entry = newEntry(process_set_id, now);
  entry.sequence = next_sequence_++;
  entry.call = call;
  if (call != 0) calls_[{process_set_id, call}] = name;
  return table_.emplace(name, std::move(entry)).first;
}

void Negotiator::place(Entry* entry, Request request) const {
  if (auto slot = slotOf(*entry, request.rank); slot && entry->slots[*slot] == Entry::Slot::kEmpty) {
    entry->slots[*slot] = Entry::Slot::kGiven;
    ++entry->submitted;
    if (!entry->dense.empty()) {
      entry->dense[*slot] = std::move(request);
      return;
    }
    entry->given.emplace_back(*slot, std::move(request));
    if (entry->given.size() > Entry::kDenseAfter) {
      entry->dense.resize(entry->slots.size());
      for (auto& [i, r] : entry->given) entry->dense[i] = std::move(r);
      std::vector<std::pair<size_t, Request>>().swap(entry->given);
    }
    return;
  }
  entry->outside.push_back(std::move(request));
}

Status Negotiator::checkMembership(const Request& request) const {
  // (Every request of every rank passes here: the message is built only
  // for an error.)
  const auto prefix = [&] { return "job '" + job_id_ + "' tensor '" + request.name + "': "; };
  const std::vector<int>* set = sets_.find(request.process_set_id);
  if (set == nullptr) {
    return invalidArgument(prefix() + "unknown process set " + std::to_string(request.process_set_id) +
                           " (never added, or removed)");
  }
  if (!std::binary_search(set->begin(), set->end(), request.rank)) {
    return invalidArgument(prefix() + "rank " + std::to_string(request.rank) + " is not a member of process set " +
                           std::to_string(request.process_set_id));
  }
  return okStatus();
}

StatusOr<std::vector<Response>> Negotiator::submit(Request request, Clock::time_point now) {
  if (request.type == v1::JOIN) return submitJoin(std::move(request), now);
  RETURN_IF_ERROR(checkMembership(request));
  auto it = table_.find(request.name);
  if (it != table_.end() && has(it->second, request.rank)) {
    return alreadyExists("job '" + job_id_ + "' tensor '" + request.name + "': rank " + std::to_string(request.rank) +
                         " already has a collective of this name in flight");
  }
  if (request.call != 0) {
    std::vector<Response> failed = failDifferentCalls(request);
    if (!failed.empty()) return failed;
  }
  if (it == table_.end()) it = addEntry(request.name, request.process_set_id, request.call, now);
  Entry& entry = it->second;
  std::vector<Response> out;
  if (request.process_set_id != entry.process_set_id) {
    // The ranks disagree on the process set: fail what was submitted so far
    // together with this request.
    std::string message = "job '" + job_id_ + "' tensor '" + request.name + "': ranks disagree on process set: rank " +
                          std::to_string(request.rank) + " uses set " + std::to_string(request.process_set_id) +
                          ", ranks before it use set " + std::to_string(entry.process_set_id);
    const std::string name = it->first;
    Entry taken = extract(it);
    place(&taken, std::move(request));
    Response failed = makeResponse(name, std::move(taken));
    failed.status = failedPrecondition(message);
    out.push_back(std::move(failed));
    return out;
  }
  place(&entry, std::move(request));
  // Only this collective can have become ready (a join readies others).
  if (isReady(entry)) release({{entry.sequence, it->first}}, &out);
  return out;
}

std::optional<std::vector<size_t>> Negotiator::markable(const Repeat& repeat, const Entry* entry) const {
  const Response& cached = *repeat.cached;
  const std::vector<int>* members = sets_.find(cached.process_set_id);
  if (members == nullptr || members->size() != cached.ranks.size() || cached.type == v1::JOIN) return std::nullopt;
  if (entry != nullptr) {
    if (entry->process_set_id != cached.process_set_id) return std::nullopt;
    if (entry->repeated && entry->repeated_id != repeat.id) return std::nullopt;
    if (repeat.call != 0 && entry->call != repeat.call) return std::nullopt;
  } else if (repeat.call != 0 && calls_.count({cached.process_set_id, repeat.call})) {
    return std::nullopt;
  }
  std::vector<size_t> slots;
  slots.reserve(repeat.ranks.size());
  for (int rank : repeat.ranks) {
    const std::optional<size_t> slot = cached.indexOf(rank);
    if (!slot || (*members)[*slot] != rank || !cached.requests[*slot]) return std::nullopt;
    if (entry != nullptr && entry->slots[*slot] != Entry::Slot::kEmpty) return std::nullopt;
    slots.push_back(*slot);
  }
  std::vector<size_t> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return std::nullopt;
  return slots;
}

Negotiator::Repeated Negotiator::submit(const Repeat& repeat, Clock::time_point now) {
  Repeated out;
  const Response& cached = *repeat.cached;
  auto it = table_.find(cached.name);
  const std::optional<std::vector<size_t>> slots = markable(repeat, it == table_.end() ? nullptr : &it->second);
  if (!slots) {
    for (size_t i = 0; i < repeat.ranks.size(); ++i) {
      auto ready = submit(repeat.request(i), now);
      if (!ready.isOk()) {
        out.refused.emplace_back(repeat.request(i), ready.status());
        continue;
      }
      for (Response& response : *ready) out.ready.push_back(std::move(response));
    }
    return out;
  }
  if (it == table_.end()) it = addEntry(cached.name, cached.process_set_id, repeat.call, now);
  Entry& entry = it->second;
  if (!entry.repeated) {
    entry.repeated = repeat.cached;
    entry.repeated_id = repeat.id;
  }
  for (size_t slot : *slots) entry.slots[slot] = Entry::Slot::kRepeated;
  entry.submitted += slots->size();
  if (isReady(entry)) release({{entry.sequence, it->first}}, &out.ready);
  return out;
}

namespace {

// "rank 1 submitted allreduce 'x' (float32 [12], call 7)", or for a rank
// that failed the call on its side, "rank 1 failed its allreduce 'x' (call
// 7) at the call: ValueError: ..."
std::string describeCall(const Request& r) {
  const std::string rank = "rank " + std::to_string(r.rank);
  const std::string call = "call " + std::to_string(r.call);
  if (!r.abandoned.empty()) {
    return rank + " failed its " + collectiveName(r.type) + " '" + r.name + "' (" + call +
           ") at the call: " + r.abandoned;
  }
  return rank + " submitted " + collectiveName(r.type) + " '" + r.name + "' (" + dataTypeName(r.dtype) + " " +
         shapeString(r.shape) + ", " + call + ")";
}

}  // namespace

std::vector<Response> Negotiator::failDifferentCalls(const Request& request) {
  // The pending collectives `request` contradicts: the one of its name under
  // another call number, and the one of its call number under another name.
  std::vector<std::string> names;
  auto same_name = table_.find(request.name);
  if (same_name != table_.end() && same_name->second.call != request.call) names.push_back(request.name);
  auto same_call = calls_.find({request.process_set_id, request.call});
  if (same_call != calls_.end() && same_call->second != request.name) names.push_back(same_call->second);
  std::vector<Response> failed;
  if (names.empty()) return failed;
  const Request theirs = table_.find(names.back())->second.lowest();
  std::string message = "job '" + job_id_ + "': the ranks made different calls on process set " +
                        std::to_string(request.process_set_id) + ": " + describeCall(request) + " where " +
                        describeCall(theirs);
  if (request.abandoned.empty() && theirs.abandoned.empty() && request.type == theirs.type) {
    if (request.dtype != theirs.dtype) {
      message += " (the dtypes differ)";
    } else if (request.shape != theirs.shape) {
      message += " (the shapes differ)";
    }
  }
  bool placed = false;
  for (const std::string& name : names) {
    Entry entry = extract(table_.find(name));
    if (name == request.name) {
      place(&entry, request);
      placed = true;
    }
    failed.push_back(makeResponse(name, std::move(entry)));
  }
  if (!placed) {
    Entry own = newEntry(request.process_set_id, Clock::now());
    place(&own, request);
    failed.push_back(makeResponse(request.name, std::move(own)));
  }
  for (Response& response : failed) response.status = failedPrecondition(message);
  return failed;
}

Negotiator::Entry Negotiator::extract(Table::iterator it) {
  Entry entry = std::move(it->second);
  if (entry.call != 0) {
    auto at = calls_.find({entry.process_set_id, entry.call});
    if (at != calls_.end() && at->second == it->first) calls_.erase(at);
  }
  table_.erase(it);
  return entry;
}

StatusOr<std::vector<Response>> Negotiator::submitJoin(Request request, Clock::time_point now) {
  if (joined_.count(request.rank)) {
    return alreadyExists("job '" + job_id_ + "': rank " + std::to_string(request.rank) + " has already joined");
  }
  joined_.insert(request.rank);
  last_joined_rank_ = request.rank;
  join_requests_.push_back(std::move(request));
  std::vector<Response> out;
  collectReady(&out);  // allreduces that waited only for this rank
  if (joined_.size() == membersOf(0).size()) {
    Response join;
    join.name = "join";
    join.type = v1::JOIN;
    join.ranks = membersOf(0);
    join.requests.resize(join.ranks.size());
    for (auto& r : join_requests_) join.requests.set(r.rank, std::move(r));
    join.last_joined_rank = last_joined_rank_;
    join_requests_.clear();
    joined_.clear();
    out.push_back(std::move(join));
  }
  return out;
}

bool Negotiator::isReady(const Entry& entry) const {
  // Requests come only from members: without joined ranks, a count.
  if (joined_.empty()) return entry.submitted == entry.slots.size();
  const std::vector<int>& members = membersOf(entry.process_set_id);
  for (size_t i = 0; i < members.size(); ++i) {
    if (entry.slots[i] == Entry::Slot::kEmpty && !joined_.count(members[i])) return false;
  }
  return true;
}

Response Negotiator::makeResponse(const std::string& name, Entry entry) const {
  Response response;
  response.name = name;
  response.process_set_id = entry.process_set_id;
  response.ranks = membersOf(entry.process_set_id);
  const bool every_slot = entry.submitted == entry.slots.size();
  if (entry.repeated && every_slot && entry.outside.empty() && entry.dense.empty() &&
      std::all_of(entry.given.begin(), entry.given.end(),
                  [&](const auto& g) { return g.second.repeats == entry.repeated_id; })) {
    // Every rank repeats one cached response: its requests, shared, with
    // the given ones (this node's ranks, with their handles) in place, in
    // increasing order (each then goes at the end of the list's changes).
    std::sort(entry.given.begin(), entry.given.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    response.requests = entry.repeated->requests;
    response.repeats = entry.repeated_id;
    for (auto& [slot, request] : entry.given) response.requests.set(slot, std::move(request));
  } else {
    std::vector<RequestList::Entry> requests = std::move(entry.dense);
    requests.resize(entry.slots.size());
    for (auto& [slot, request] : entry.given) requests[slot] = std::move(request);
    for (size_t i = 0; i < entry.slots.size(); ++i) {
      if (entry.slots[i] == Entry::Slot::kRepeated) requests[i] = entry.at(i);
    }
    response.requests = RequestList(std::move(requests));
  }
  // A rank outside the set (only reachable through a set mismatch) still
  // needs its answer: appended, in rank order.
  std::sort(entry.outside.begin(), entry.outside.end(),
            [](const Request& a, const Request& b) { return a.rank < b.rank; });
  for (Request& request : entry.outside) {
    response.ranks.push_back(request.rank);
    response.requests.push_back(std::move(request));
  }
  response.type = response.first().type;
  return response;
}

void Negotiator::collectReady(std::vector<Response>* out) {
  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& [name, entry] : table_) {
    if (isReady(entry)) ready.emplace_back(entry.sequence, name);
  }
  release(std::move(ready), out);
}

void Negotiator::release(std::vector<std::pair<uint64_t, std::string>> ready, std::vector<Response>* out) {
  std::sort(ready.begin(), ready.end());
  std::vector<Response> responses;
  for (const auto& [sequence, name] : ready) {
    Response response = makeResponse(name, extract(table_.find(name)));
    if (response.activeCount() == 0) continue;  // every member joined: nothing to do
    // Requests that all repeat one cached response passed these checks
    // together, with the same metadata.
    response.status = response.repeatedId() != 0 ? okStatus() : checkAgreement(job_id_, response);
    std::vector<Response> removed_work;
    if (response.status.isOk() && changesProcessSets(response.type)) changeProcessSets(&response, &removed_work);
    responses.push_back(std::move(response));
    for (auto& failed : removed_work) responses.push_back(std::move(failed));
  }
  releaseGroups(std::move(responses), out);
}

void Negotiator::changeProcessSets(Response* response, std::vector<Response>* failed) {
  const Request& first = response->first();
  const std::string prefix = "job '" + job_id_ + "' " + collectiveName(response->type) + " '" + response->name + "': ";
  if (response->type == v1::PROCESS_SET_ADD) {
    auto id = sets_.add(first.set_ranks);
    if (!id.isOk()) {
      response->status = Status(id.status().code(), prefix + id.status().message());
      return;
    }
    response->changed_process_set = *id;
    return;
  }
  const int id = first.target_set;
  const std::vector<int>* members = sets_.find(id);
  if (members == nullptr || id == 0) {
    response->status = failedPrecondition(prefix + (id == 0 ? "the global process set (id 0) cannot be removed"
                                                            : "there is no process set " + std::to_string(id)));
    return;
  }
  const std::string why = "job '" + job_id_ + "': " + ProcessSetTable::describe(id, *members) + " was removed (by '" +
                          response->name + "') while this collective waited for ranks ";
  // What waits for ranks on that set will never complete: fail it, in
  // submission order, before the set goes.
  std::vector<std::pair<uint64_t, std::string>> doomed;
  for (const auto& [name, entry] : table_) {
    if (entry.process_set_id == id) doomed.emplace_back(entry.sequence, name);
  }
  std::sort(doomed.begin(), doomed.end());
  for (const auto& [sequence, name] : doomed) {
    Response r = makeResponse(name, extract(table_.find(name)));
    std::vector<int> missing;
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      if (!r.requests[i] && !joined_.count(r.ranks[i])) missing.push_back(r.ranks[i]);
    }
    r.status = failedPrecondition(why + ranksString(missing) + " (tensor '" + name + "')");
    failed->push_back(std::move(r));
  }
  // Grouped members already agreed, held for the rest of their group.
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.empty() || it->second.front().process_set_id != id) {
      ++it;
      continue;
    }
    for (auto& member : it->second) {
      member.status = failedPrecondition(why + "(the rest of its group, tensor '" + member.name + "')");
      failed->push_back(std::move(member));
    }
    it = groups_.erase(it);
  }
  response->changed_process_set = id;
  (void)sets_.remove(id);
}

Status Negotiator::applyLeaderChange(const Response& response) {
  if (response.type == v1::PROCESS_SET_ADD) {
    return sets_.insert(response.changed_process_set, response.first().set_ranks);
  }
  return sets_.remove(response.changed_process_set);
}

void Negotiator::releaseGroups(std::vector<Response> ready, std::vector<Response>* out) {
  for (auto& response : ready) {
    const Request& first = response.first();
    if (first.group_id == 0 || !response.status.isOk()) {
      out->push_back(std::move(response));
      continue;
    }
    auto& members = groups_[first.group_id];
    const uint32_t group_size = first.group_size;
    members.push_back(std::move(response));
    if (members.size() >= group_size) {
      for (auto& member : members) out->push_back(std::move(member));
      groups_.erase(first.group_id);
    }
  }
}

std::vector<Stall> Negotiator::stalls(Clock::time_point now, Clock::duration threshold) const {
  std::vector<std::pair<Clock::time_point, Stall>> found;
  for (const auto& [name, entry] : table_) {
    if (now - entry.first_seen < threshold) continue;
    Stall stall;
    stall.name = name;
    stall.age = now - entry.first_seen;
    const std::vector<int>& members = membersOf(entry.process_set_id);
    for (size_t i = 0; i < members.size(); ++i) {
      if (entry.slots[i] != Entry::Slot::kEmpty) {
        stall.submitted_ranks.push_back(members[i]);
      } else if (!joined_.count(members[i])) {
        stall.missing_ranks.push_back(members[i]);
      }
    }
    found.emplace_back(entry.first_seen, std::move(stall));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Stall> out;
  for (auto& [when, stall] : found) out.push_back(std::move(stall));
  return out;
}

std::vector<Request> Negotiator::take(const std::string& name) {
  std::vector<Request> out;
  auto it = table_.find(name);
  if (it == table_.end()) return out;
  return extract(it).takeInRankOrder();
}

std::vector<Request> Negotiator::takeAll() {
  std::vector<Request> out;
  // In submission order, each collective's requests in rank order.
  std::vector<std::pair<uint64_t, Entry*>> pending;
  for (auto& [name, entry] : table_) pending.emplace_back(entry.sequence, &entry);
  std::sort(pending.begin(), pending.end());
  for (auto& [sequence, entry] : pending) {
    for (Request& request : entry->takeInRankOrder()) out.push_back(std::move(request));
  }
  table_.clear();
  calls_.clear();
  for (auto& request : join_requests_) out.push_back(std::move(request));
  join_requests_.clear();
  joined_.clear();
  for (auto& [id, members] : groups_) {
    for (auto& response : members) {
      for (auto& request : response.requests.mutableAll()) {
        if (request) out.push_back(std::move(*request));
      }
    }
  }
  groups_.clear();
  return out;
}

}  // namespace gradsync::coordinator
