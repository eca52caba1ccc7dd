// SPDX-License-Identifier: Apache-2.0
// Autotune's measurements written down by the rank that asked
// (GRADSYNC_AUTOTUNE_LOG, as Horovod's HOROVOD_AUTOTUNE_LOG): a CSV file the
// client opens and writes itself, so the daemon writes nothing where a
// client names. One line per AutotuneSample the daemon sends, flushed at
// once (a job killed mid-tuning keeps what was measured).
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::client {

class AutotuneLog {
 public:
  // The CSV header line, as the file starts.
  static constexpr const char* kHeader = "fusion_threshold_bytes,cycle_time_ms,bytes_per_second,phase";

  // Creates (or truncates) `path` and writes the header.
  static StatusOr<std::unique_ptr<AutotuneLog>> open(const std::string& path);
  ~AutotuneLog();
  AutotuneLog(const AutotuneLog&) = delete;
  AutotuneLog& operator=(const AutotuneLog&) = delete;

  void write(const v1::AutotuneSample& sample);

 private:
  explicit AutotuneLog(std::FILE* file) : file_(file) {}
  Mutex mutex_;
  std::FILE* file_;
};

}  // namespace gradsync::client
