// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_timeline.h"

#include <cctype>

namespace gradsync::server {
namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Status JobTimeline::start(UniqueFd file, bool mark_cycles) {
  ASSIGN_OR_RETURN(std::unique_ptr<timeline::Timeline> timeline,
                   timeline::Timeline::start(std::move(file), mark_cycles));
  MutexLock lock(mutex_);
  negotiating_.clear();  // rows of the old one
  timeline_ = std::move(timeline);
  on_.store(true);
  return okStatus();
}

void JobTimeline::stop() {
  MutexLock lock(mutex_);
  timeline_.reset();
  negotiating_.clear();
  on_.store(false);
}

std::shared_ptr<timeline::Timeline> JobTimeline::current() const {
  if (!on_.load(std::memory_order_relaxed)) return nullptr;  // the common case: no lock
  MutexLock lock(mutex_);
  return timeline_;
}

void JobTimeline::requestArrived(const std::string& name, CollectiveType type, int rank) {
  if (!on_.load(std::memory_order_relaxed)) return;
  MutexLock lock(mutex_);
  if (!timeline_) return;
  if (negotiating_.insert(name).second) timeline_->begin(name, "NEGOTIATE_" + upper(collectiveName(type)));
  timeline_->instant(name, "rank " + std::to_string(rank) + " ready", {{"rank", std::to_string(rank)}});
}

void JobTimeline::negotiated(const std::string& name, CollectiveType type) {
  if (!on_.load(std::memory_order_relaxed)) return;
  MutexLock lock(mutex_);
  if (timeline_ && negotiating_.erase(name) > 0) timeline_->end(name, "NEGOTIATE_" + upper(collectiveName(type)));
}

void JobTimeline::executionBegins(const fusion::FusedResponse& fused) {
  executing_ = current();
  executing_names_.clear();
  if (!executing_) return;
  executing_->cycle();
  for (const auto& r : fused.responses) {
    executing_names_.push_back(r.name);
    const uint64_t bytes = r.activeCount() > 0 ? r.first().length : 0;
    executing_->begin(r.name, upper(collectiveName(r.type)),
                      {{"bytes", std::to_string(bytes)},
                       {"dtype", timeline::Timeline::quote(r.activeCount() > 0 ? dataTypeName(r.first().dtype) : "")},
                       {"fused_tensors", std::to_string(fused.responses.size())},
                       {"fused_bytes", std::to_string(fused.bytes)}});
  }
}

void JobTimeline::phase(const char* name, bool begin) {
  if (!executing_) return;
  for (const auto& tensor : executing_names_) {
    if (begin) {
      executing_->begin(tensor, name);
    } else {
      executing_->end(tensor, name);
    }
  }
}

void JobTimeline::gpuSpan(const char* name, std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end) {
  if (!executing_) return;
  for (const auto& tensor : executing_names_) executing_->span(tensor, name, start, end);
}

void JobTimeline::executionEnds(const fusion::FusedResponse& fused,
                                const std::vector<executor::ResponseResult>& results) {
  if (executing_) {
    for (size_t i = 0; i < fused.responses.size(); ++i) {
      const bool ok = i < results.size() && results[i].status.isOk();
      executing_->end(fused.responses[i].name, upper(collectiveName(fused.responses[i].type)),
                      {{"ok", ok ? "true" : "false"}});
    }
  }
  executing_.reset();
  executing_names_.clear();
}

}  // namespace gradsync::server
