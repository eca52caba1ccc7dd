// SPDX-License-Identifier: Apache-2.0
// The job timeline's GPU phases of one batch on one stream, measured with
// CUDA events and read back: nothing at all unless the job's timeline
// records the batch. Then it first waits (bounded) for the stream to drain,
// so that the anchor event it records is reached at once and its host time
// is known; each phase is a pair of events on the stream; finish() waits
// for the stream again and reports each phase at the anchor's time plus
// the events' elapsed time. The waits cost the batch its overlap with the
// next one, only while a timeline runs. Timing is best effort: a failing
// CUDA call ends it without touching the collective.
#pragma once

#include <chrono>
#include <vector>

#include "daemon/executor/rank_access.h"
#include "daemon/gpu/device_ops.h"

namespace gradsync::executor {

class GpuPhaseTimer {
 public:
  GpuPhaseTimer(gpu::DeviceOps* ops, RankAccess& access, int device, void* stream);
  ~GpuPhaseTimer();
  GpuPhaseTimer(const GpuPhaseTimer&) = delete;
  GpuPhaseTimer& operator=(const GpuPhaseTimer&) = delete;

  // Phase `name` (a literal) begins, or the one begun last ends, on the
  // stream.
  void begin(const char* name);
  void end();
  // Reports the phases to the timeline (once; the destructor does not).
  void finish();

 private:
  struct Phase {
    const char* name;
    void* begin = nullptr;
    void* end = nullptr;
  };
  void* mark();  // a timed event recorded on the stream now (null: timing ended)
  void stop();

  gpu::DeviceOps* const ops_;
  RankAccess& access_;
  const int device_;
  void* const stream_;
  bool active_ = false;
  void* anchor_ = nullptr;
  std::chrono::steady_clock::time_point anchor_time_;
  std::vector<Phase> phases_;
  std::vector<void*> events_;
};

}  // namespace gradsync::executor
