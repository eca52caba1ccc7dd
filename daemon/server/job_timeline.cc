// SPDX-License-Identifier: Apache-2.0
// Job, timeline part: what the job's timeline records. Rows are tensors;
// NEGOTIATE_<COLLECTIVE> spans from the first rank's request to the
// response (with an instant per rank as it arrives: the waiting for ranks),
// then <COLLECTIVE> spans the execution, with the phases the executor and
// the cross-node transfers report inside it.
#include <cctype>

#include "daemon/server/job.h"

namespace gradsync::server {
namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Status Job::startTimeline(UniqueFd file, bool mark_cycles) {
  ASSIGN_OR_RETURN(std::unique_ptr<timeline::Timeline> timeline,
                   timeline::Timeline::start(std::move(file), mark_cycles));
  MutexLock lock(mutex_);  // negotiating_ belongs to the old one
  negotiating_.clear();
  MutexLock timeline_lock(timeline_mutex_);
  timeline_ = std::move(timeline);
  timeline_on_.store(true);
  return okStatus();
}

void Job::stopTimeline() {
  MutexLock lock(timeline_mutex_);
  timeline_.reset();
  timeline_on_.store(false);
}

std::shared_ptr<timeline::Timeline> Job::timeline() const {
  if (!timeline_on_.load(std::memory_order_relaxed)) return nullptr;  // the common case: no lock
  MutexLock lock(timeline_mutex_);
  return timeline_;
}

void Job::timelineRequestLocked(timeline::Timeline* tl, const coordinator::Request& request) {
  if (negotiating_.insert(request.name).second) {
    tl->begin(request.name, "NEGOTIATE_" + upper(collectiveName(request.type)));
  }
  tl->instant(request.name, "rank " + std::to_string(request.rank) + " ready",
              {{"rank", std::to_string(request.rank)}});
}

void Job::timelineNegotiatedLocked(timeline::Timeline* tl, const std::string& name, CollectiveType type) {
  if (negotiating_.erase(name) > 0) tl->end(name, "NEGOTIATE_" + upper(collectiveName(type)));
}

void Job::timelineExecution(const fusion::FusedResponse& fused, bool begin,
                            const std::vector<executor::ResponseResult>* results) {
  if (begin) {
    executing_timeline_ = timeline();
    executing_names_.clear();
    if (!executing_timeline_) return;
    executing_timeline_->cycle();
    for (const auto& r : fused.responses) executing_names_.push_back(r.name);
  }
  if (!executing_timeline_) return;
  for (size_t i = 0; i < fused.responses.size(); ++i) {
    const auto& r = fused.responses[i];
    const std::string phase = upper(collectiveName(r.type));
    if (begin) {
      const uint64_t bytes = r.activeCount() > 0 ? r.first().length : 0;
      executing_timeline_->begin(
          r.name, phase,
          {{"bytes", std::to_string(bytes)},
           {"dtype", timeline::Timeline::quote(r.activeCount() > 0 ? dataTypeName(r.first().dtype) : "")},
           {"fused_tensors", std::to_string(fused.responses.size())},
           {"fused_bytes", std::to_string(fused.bytes)}});
    } else {
      const bool ok = results != nullptr && i < results->size() && (*results)[i].status.isOk();
      executing_timeline_->end(r.name, phase, {{"ok", ok ? "true" : "false"}});
    }
  }
  if (!begin) {
    executing_timeline_.reset();
    executing_names_.clear();
  }
}

void Job::phase(const char* name, bool begin) {
  stats_.phase(name, begin, Clock::now());
  if (!executing_timeline_) return;
  for (const auto& tensor : executing_names_) {
    if (begin) {
      executing_timeline_->begin(tensor, name);
    } else {
      executing_timeline_->end(tensor, name);
    }
  }
}

}  // namespace gradsync::server
