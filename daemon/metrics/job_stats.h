// SPDX-License-Identifier: Apache-2.0
// What a job did, for metrics: operations and bytes by collective and dtype,
// latency histograms (enqueue to done) by collective, time spent queued
// (negotiation and waiting for the other ranks) and in each execution
// phase, fused response sizes, and errors by cause. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/metrics/histogram.h"
#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::metrics {

class JobStats {
 public:
  using Clock = std::chrono::steady_clock;

  // One local rank's collective completed (`dtype` DATA_TYPE_UNSPECIFIED
  // for those without data): `bytes` of input, enqueued at
  // `enqueued`, its fused response started at `started`, done `now`.
  void done(CollectiveType type, DataType dtype, uint64_t bytes, Clock::time_point enqueued, Clock::time_point started,
            Clock::time_point now);
  // One collective of a local rank failed (or was refused) with `code`;
  // `message`, when given, is the job's last error from now on.
  void failed(StatusCode code, const std::string& message = std::string());
  // A collective completed on this daemon (once, whatever its local ranks).
  void collectiveDone();
  // A fused response of `bytes` ran.
  void fused(uint64_t bytes);
  // Execution phases, as the executor opens and closes them (nested phases
  // count in each that encloses them). Names are the executor's fixed set.
  void phase(const char* name, bool begin, Clock::time_point now);

  // Adds the statistics to `info` (collective_stats, latency, ...; the
  // totals operations_done, bytes_done, errors, last_error, fused_responses).
  void fill(v1::JobInfo* info) const;

 private:
  struct Count {
    uint64_t operations = 0;
    uint64_t bytes = 0;
  };
  struct Phase {
    double seconds = 0;
    uint64_t count = 0;
  };
  mutable Mutex mutex_;
  std::map<std::pair<CollectiveType, DataType>, Count> counts_ GS_GUARDED_BY(mutex_);
  std::map<CollectiveType, Histogram> latency_ GS_GUARDED_BY(mutex_);
  double queued_seconds_ GS_GUARDED_BY(mutex_) = 0;
  Histogram fused_bytes_ GS_GUARDED_BY(mutex_) = Histogram::sizeBytes();
  std::map<std::string, Phase> phases_ GS_GUARDED_BY(mutex_);
  std::vector<std::pair<const char*, Clock::time_point>> open_phases_ GS_GUARDED_BY(mutex_);
  std::map<StatusCode, uint64_t> errors_ GS_GUARDED_BY(mutex_);
  uint64_t collectives_done_ GS_GUARDED_BY(mutex_) = 0;
  uint64_t bytes_done_ GS_GUARDED_BY(mutex_) = 0;
  uint64_t error_count_ GS_GUARDED_BY(mutex_) = 0;
  uint64_t fused_count_ GS_GUARDED_BY(mutex_) = 0;
  std::string last_error_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::metrics
