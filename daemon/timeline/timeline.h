// SPDX-License-Identifier: Apache-2.0
// A job's timeline: Chrome-trace JSON (Perfetto, chrome://tracing) with one
// row ("process") per tensor, written as it happens to a file the client
// opened. The file is a valid JSON array after every event: each write
// replaces the closing bracket with ",<event>]", in one write(2), so a job
// or daemon that dies leaves a readable file. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"

namespace gradsync::timeline {

class Timeline {
 public:
  using Args = std::vector<std::pair<std::string, std::string>>;  // values already JSON (numbers, "strings")

  // Takes `fd` (a regular file opened for writing, truncated here) and
  // writes the opening of the trace. `mark_cycles`: cycle() writes markers.
  static StatusOr<std::unique_ptr<Timeline>> start(UniqueFd fd, bool mark_cycles);

  // Phase `phase` of tensor `tensor` begins / ends (ph "B" / "E").
  void begin(const std::string& tensor, const std::string& phase, const Args& args = {});
  void end(const std::string& tensor, const std::string& phase, const Args& args = {});
  // A phase measured elsewhere (the GPU's, from CUDA events): from `start`
  // to `end` on the tensor's second track (ph "X", tid 1).
  void span(const std::string& tensor, const std::string& phase, std::chrono::steady_clock::time_point start,
            std::chrono::steady_clock::time_point end);
  // A moment on the tensor's row (ph "i"), e.g. a rank that became ready.
  void instant(const std::string& tensor, const std::string& what, const Args& args = {});
  // A cycle of the job's executor (only with mark_cycles).
  void cycle();
  // Events written, and the first write error ("" when none: writing stops at one).
  uint64_t events() const;
  std::string error() const;

  static std::string quote(const std::string& text);  // a JSON string literal

 private:
  Timeline(UniqueFd fd, bool mark_cycles) : fd_(std::move(fd)), mark_cycles_(mark_cycles) {}
  void write(const std::string& tensor, const std::string& event_without_pid);
  int64_t nowMicros() const;

  const UniqueFd fd_;
  const bool mark_cycles_;
  const std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  mutable Mutex mutex_;
  std::map<std::string, int> pids_ GS_GUARDED_BY(mutex_);  // tensor -> row
  off_t end_ GS_GUARDED_BY(mutex_) = 0;                    // offset of the closing ']'
  uint64_t events_ GS_GUARDED_BY(mutex_) = 0;
  std::string error_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::timeline
