// SPDX-License-Identifier: Apache-2.0
#include "client/src/autotune_log.h"

#include <cerrno>
#include <cstring>

namespace gradsync::client {

StatusOr<std::unique_ptr<AutotuneLog>> AutotuneLog::open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "we");
  if (file == nullptr) {
    return invalidArgument("cannot create the autotune log " + path +
                           " (GRADSYNC_AUTOTUNE_LOG): " + std::strerror(errno));
  }
  std::fprintf(file, "%s\n", kHeader);
  std::fflush(file);
  return std::unique_ptr<AutotuneLog>(new AutotuneLog(file));
}

AutotuneLog::~AutotuneLog() { std::fclose(file_); }

void AutotuneLog::write(const v1::AutotuneSample& sample) {
  // The phase is the daemon's word: keep the CSV one field per column.
  std::string phase = sample.phase().substr(0, 64);
  for (char& c : phase) {
    if (c == ',' || c == '\n' || c == '\r' || c == '"') c = ' ';
  }
  MutexLock lock(mutex_);
  std::fprintf(file_, "%llu,%g,%.1f,%s\n", static_cast<unsigned long long>(sample.fusion_threshold_bytes()),
               sample.cycle_time_ms(), sample.bytes_per_second(), phase.c_str());
  std::fflush(file_);
}

}  // namespace gradsync::client
