// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/job_stats.h"

#include <cstring>

namespace gradsync::metrics {
namespace {
double seconds(JobStats::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void JobStats::done(CollectiveType type, DataType dtype, uint64_t bytes, Clock::time_point enqueued,
                    Clock::time_point started, Clock::time_point now) {
  MutexLock lock(mutex_);
  Count& count = counts_[{type, dtype}];
  ++count.operations;
  count.bytes += bytes;
  bytes_done_ += bytes;
  if (enqueued == Clock::time_point{}) return;  // not taken from a local rank
  auto it = latency_.find(type);
  if (it == latency_.end()) it = latency_.emplace(type, Histogram::latencySeconds()).first;
  it->second.observe(seconds(now - enqueued));
  if (started > enqueued) queued_seconds_ += seconds(started - enqueued);
}

void JobStats::failed(StatusCode code, const std::string& message) {
  MutexLock lock(mutex_);
  ++errors_[code];
  ++error_count_;
  if (!message.empty()) last_error_ = message;
}

void JobStats::collectiveDone() {
  MutexLock lock(mutex_);
  ++collectives_done_;
}

void JobStats::fused(uint64_t bytes) {
  MutexLock lock(mutex_);
  fused_bytes_.observe(static_cast<double>(bytes));
  ++fused_count_;
}

void JobStats::phase(const char* name, bool begin, Clock::time_point now) {
  MutexLock lock(mutex_);
  if (begin) {
    open_phases_.emplace_back(name, now);
    return;
  }
  // The innermost open phase of that name (phases close in order).
  for (auto it = open_phases_.rbegin(); it != open_phases_.rend(); ++it) {
    if (std::strcmp(it->first, name) != 0) continue;
    Phase& phase = phases_[name];
    phase.seconds += seconds(now - it->second);
    ++phase.count;
    open_phases_.erase(std::next(it).base());
    return;
  }
}

void JobStats::fill(v1::JobInfo* info) const {
  MutexLock lock(mutex_);
  info->set_operations_done(collectives_done_);
  info->set_bytes_done(bytes_done_);
  info->set_errors(error_count_);
  info->set_last_error(last_error_);
  info->set_fused_responses(fused_count_);
  for (const auto& [key, count] : counts_) {
    v1::CollectiveStats* stats = info->add_collective_stats();
    stats->set_type(key.first);
    stats->set_dtype(key.second);
    stats->set_operations(count.operations);
    stats->set_bytes(count.bytes);
  }
  for (const auto& [type, histogram] : latency_) {
    v1::LatencyStats* latency = info->add_latency();
    latency->set_type(type);
    histogram.fill(latency->mutable_seconds());
  }
  info->set_queued_seconds(queued_seconds_);
  fused_bytes_.fill(info->mutable_fused_response_bytes());
  for (const auto& [name, phase] : phases_) {
    v1::PhaseTime* time = info->add_phases();
    time->set_name(name);
    time->set_seconds(phase.seconds);
    time->set_count(phase.count);
  }
  for (const auto& [code, count] : errors_) {
    v1::ErrorCount* error = info->add_errors_by_cause();
    error->set_cause(statusCodeName(code));
    error->set_count(count);
  }
}

}  // namespace gradsync::metrics
