// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/gpu_phase_timer.h"

namespace gradsync::executor {

GpuPhaseTimer::GpuPhaseTimer(gpu::DeviceOps* ops, RankAccess& access, int device, void* stream)
    : ops_(ops), access_(access), device_(device), stream_(stream) {
  if (stream == nullptr || device < 0 || !access.timelineOn()) return;
  if (!ops_->select(device_).isOk()) return;
  if (!ops_->waitStream(stream_, "waiting for the stream before timing its work").isOk()) return;
  active_ = true;
  anchor_ = mark();
  anchor_time_ = std::chrono::steady_clock::now();
}

GpuPhaseTimer::~GpuPhaseTimer() {
  for (void* event : events_) ops_->destroyTimedEvent(device_, event);
}

void* GpuPhaseTimer::mark() {
  if (!active_) return nullptr;
  // The stream's GPU current (the callers select theirs before each call).
  if (!ops_->select(device_).isOk()) {
    stop();
    return nullptr;
  }
  auto event = ops_->newTimedEvent(device_);
  if (!event.isOk()) {
    stop();
    return nullptr;
  }
  events_.push_back(*event);
  if (!ops_->recordEvent(*event, stream_).isOk()) {
    stop();
    return nullptr;
  }
  return *event;
}

void GpuPhaseTimer::stop() { active_ = false; }

void GpuPhaseTimer::begin(const char* name) {
  if (!active_) return;
  phases_.push_back(Phase{name, mark()});
}

void GpuPhaseTimer::end() {
  if (!active_ || phases_.empty() || phases_.back().end != nullptr) return;
  phases_.back().end = mark();
}

void GpuPhaseTimer::finish() {
  if (!active_) return;
  active_ = false;
  if (!ops_->select(device_).isOk() || !ops_->waitStream(stream_, "waiting for the stream to read its timing").isOk()) {
    return;
  }
  const auto at = [&](void* event) -> std::chrono::steady_clock::time_point {
    auto ms = ops_->elapsedMs(anchor_, event);
    const double elapsed = ms.isOk() ? *ms : 0.0;
    return anchor_time_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double, std::milli>(elapsed));
  };
  for (const Phase& phase : phases_) {
    if (phase.begin == nullptr || phase.end == nullptr) continue;
    access_.gpuPhase(phase.name, at(phase.begin), at(phase.end));
  }
}

}  // namespace gradsync::executor
