// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_negotiation.h"

#include <algorithm>

#include "daemon/common/logging.h"

namespace gradsync::server {

using coordinator::Clock;

JobNegotiation::JobNegotiation(std::string job_id, int size, std::vector<std::vector<int>> process_sets,
                               Clock::duration stall_deadline)
    : job_id_(std::move(job_id)),
      negotiator_(job_id_, size, std::move(process_sets)),
      stalls_(job_id_, stall_deadline),
      size_(size),
      sets_(std::make_shared<const coordinator::ProcessSetTable>(negotiator_.processSets())) {}

StatusOr<std::vector<coordinator::Response>> JobNegotiation::submit(coordinator::Request request,
                                                                    Clock::time_point now) {
  MutexLock lock(mutex_);
  return negotiator_.submit(std::move(request), now);
}

coordinator::Negotiator::Repeated JobNegotiation::submit(const coordinator::Repeat& repeat, Clock::time_point now) {
  MutexLock lock(mutex_);
  return negotiator_.submit(repeat, now);
}

void JobNegotiation::publish(const std::vector<coordinator::Response>& responses, bool from_leader) {
  // Nearly every batch changes no set: no lock for those (a request's path).
  if (std::none_of(responses.begin(), responses.end(),
                   [](const coordinator::Response& r) { return changesProcessSets(r.type) && r.status.isOk(); })) {
    return;
  }
  MutexLock lock(mutex_);
  bool changed = false;
  for (const auto& r : responses) {
    if (!changesProcessSets(r.type) || !r.status.isOk()) continue;
    if (from_leader) {
      Status applied = negotiator_.applyLeaderChange(r);
      if (!applied.isOk()) {
        GS_LOG(control, err, "job '{}': the leader's {} '{}' does not apply here: {}", job_id_, collectiveName(r.type),
               r.name, applied.message());
        continue;
      }
    }
    changed = true;
    GS_LOG(control, info, "job '{}': process set {} {} by '{}'", job_id_, r.changed_process_set,
           r.type == v1::PROCESS_SET_ADD ? "added, ranks " + coordinator::ranksString(r.first().set_ranks) : "removed",
           r.name);
  }
  if (changed) publishLocked();
}

void JobNegotiation::resize(int size) {
  MutexLock lock(mutex_);
  size_.store(size);  // (the order enqueue checks have always seen: the size first, then the sets)
  negotiator_ = coordinator::Negotiator(job_id_, size, {});
  stalls_.clear();
  publishLocked();
}

void JobNegotiation::publishLocked() {
  std::atomic_store(&sets_, std::make_shared<const coordinator::ProcessSetTable>(negotiator_.processSets()));
}

size_t JobNegotiation::pendingCount() const {
  MutexLock lock(mutex_);
  return negotiator_.pendingCount();
}

bool JobNegotiation::joined(int rank) const {
  MutexLock lock(mutex_);
  return negotiator_.joined(rank);
}

std::vector<coordinator::Request> JobNegotiation::takeAll() {
  MutexLock lock(mutex_);
  return negotiator_.takeAll();
}

std::vector<JobNegotiation::Expired> JobNegotiation::checkStalls(Clock::time_point now, Clock::duration warning,
                                                                 const std::function<std::string(int rank)>& local,
                                                                 std::optional<std::vector<v1::NodeInfo>> nodes) {
  MutexLock lock(mutex_);
  if (nodes) stalls_.setNodes(std::move(*nodes));
  const StallWatch::Review review = stalls_.review(negotiator_.stalls(now, warning), local);
  for (const auto& what : review.warnings) GS_LOG(coordinator, warn, "stall: {}", what);
  std::vector<Expired> expired;
  for (const auto& [name, what] : review.expired) {
    GS_LOG(coordinator, err, "{}: deadline passed, failing it", what);
    expired.push_back({what, negotiator_.take(name)});
  }
  return expired;
}

uint64_t JobNegotiation::stallWarnings() const {
  MutexLock lock(mutex_);
  return stalls_.warnings();
}

void JobNegotiation::describe(Clock::time_point now, v1::JobTensors* out) const {
  MutexLock lock(mutex_);
  for (const auto& stall : negotiator_.stalls(now, Clock::duration::zero())) {
    v1::TensorInFlight* tensor = out->add_negotiating();
    tensor->set_name(stall.name);
    tensor->set_age_seconds(std::chrono::duration<double>(stall.age).count());
    for (int rank : stall.submitted_ranks) tensor->add_submitted_ranks(rank);
    for (int rank : stall.missing_ranks) tensor->add_missing_ranks(rank);
  }
}

void JobNegotiation::describeProcessSets(v1::JobInfo* info) const {
  for (const auto& [id, ranks] : processSets()->all()) {
    if (id == 0) continue;
    v1::ProcessSetStatus* set = info->add_process_sets();
    set->set_id(id);
    for (int r : ranks) set->add_ranks(r);
  }
}

}  // namespace gradsync::server
