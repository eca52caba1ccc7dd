// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/output_grants.h"

#include <algorithm>

namespace gradsync::server {

bool OutputGrants::deliver(const Key& key, const v1::OutputGrant& grant) {
  if (expected_.erase(key) == 0) return false;
  granted_[key] = grant;
  return true;
}

void OutputGrants::beginWait(const std::string& tensor, const std::vector<Key>& keys, Clock::time_point since) {
  wait_ = Wait{tensor, since, keys};
}

bool OutputGrants::allGranted(const std::vector<Key>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const Key& key) { return granted_.count(key) > 0; });
}

OutputGrants::Outcome OutputGrants::endWait(const std::vector<Key>& keys) {
  wait_.reset();
  Outcome outcome;
  for (const auto& key : keys) {
    auto it = granted_.find(key);
    if (it != granted_.end()) {
      outcome.answers.push_back(it->second);
      granted_.erase(it);
    } else {
      outcome.waiting.push_back(key.first);
    }
    expected_.erase(key);
  }
  return outcome;
}

void OutputGrants::clear() {
  expected_.clear();
  granted_.clear();
}

void OutputGrants::describe(Clock::time_point now, v1::JobTensors* out) const {
  if (!wait_) return;
  v1::TensorAwaitingOutput* tensor = out->add_awaiting_output();
  tensor->set_name(wait_->tensor);
  tensor->set_age_seconds(std::chrono::duration<double>(now - wait_->since).count());
  for (const auto& key : wait_->keys) {
    if (granted_.count(key)) {
      tensor->add_granted_ranks(key.first);
    } else {
      tensor->add_waiting_ranks(key.first);
    }
  }
}

StatusOr<uint8_t*> OutputGrants::pointer(const std::string& who, const handoff::ShmArena* arena,
                                         const v1::OutputGrant& grant, uint64_t expected) {
  if (!grant.error().empty()) {
    return resourceExhausted(who + " could not reserve " + std::to_string(expected) +
                             " bytes of output: " + grant.error());
  }
  if (grant.length() != expected) {
    return invalidArgument(who + " granted " + std::to_string(grant.length()) + " bytes of output, " +
                           std::to_string(expected) + " were requested");
  }
  if (arena == nullptr) return failedPrecondition(who + " has no arena");
  return arena->range(grant.offset(), grant.length());
}

}  // namespace gradsync::server
