// SPDX-License-Identifier: Apache-2.0
#include "daemon/timeline/timeline.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gradsync::timeline {
namespace {

std::string argsJson(const Timeline::Args& args) {
  std::string out = "{";
  for (size_t i = 0; i < args.size(); ++i) {
    out += (i ? "," : "") + Timeline::quote(args[i].first) + ":" + args[i].second;
  }
  return out + "}";
}

}  // namespace

std::string Timeline::quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {  // control bytes, and non-ASCII bytes as \u00XX (names are bytes)
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

StatusOr<std::unique_ptr<Timeline>> Timeline::start(UniqueFd fd, bool mark_cycles) {
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return invalidArgument("the timeline must be a regular file opened for writing");
  }
  if (::ftruncate(fd.get(), 0) != 0) return internalError(std::string("timeline: ftruncate: ") + std::strerror(errno));
  std::unique_ptr<Timeline> timeline(new Timeline(std::move(fd), mark_cycles));
  static const char kOpening[] = "[\n]";
  if (::pwrite(timeline->fd_.get(), kOpening, sizeof(kOpening) - 1, 0) != sizeof(kOpening) - 1) {
    return internalError(std::string("timeline: write: ") + std::strerror(errno));
  }
  {
    MutexLock lock(timeline->mutex_);  // (not shared yet)
    timeline->end_ = sizeof(kOpening) - 2;
  }
  return timeline;
}

int64_t Timeline::nowMicros() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin_).count();
}

void Timeline::write(const std::string& tensor, const std::string& event) {
  MutexLock lock(mutex_);
  if (!error_.empty()) return;
  std::string chunk;
  auto [it, is_new] = pids_.emplace(tensor, static_cast<int>(pids_.size()) + 1);
  const std::string pid = std::to_string(it->second);
  if (is_new) {
    chunk += std::string(events_ ? "," : "") + "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid +
             ",\"args\":{\"name\":" + quote(tensor) +
             "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" + pid +
             "}}";
    events_ += 2;
  }
  chunk += std::string(events_ ? "," : "") + "{\"pid\":" + pid + "," + event + "}\n]";
  const ssize_t written = ::pwrite(fd_.get(), chunk.data(), chunk.size(), end_);
  if (written != static_cast<ssize_t>(chunk.size())) {
    error_ = written < 0 ? std::strerror(errno) : "short write";
    return;
  }
  end_ += static_cast<off_t>(chunk.size()) - 1;
  ++events_;
}

void Timeline::begin(const std::string& tensor, const std::string& phase, const Args& args) {
  write(tensor, "\"tid\":0,\"ph\":\"B\",\"name\":" + quote(phase) + ",\"ts\":" + std::to_string(nowMicros()) +
                    (args.empty() ? "" : ",\"args\":" + argsJson(args)));
}

void Timeline::end(const std::string& tensor, const std::string& phase, const Args& args) {
  write(tensor, "\"tid\":0,\"ph\":\"E\",\"name\":" + quote(phase) + ",\"ts\":" + std::to_string(nowMicros()) +
                    (args.empty() ? "" : ",\"args\":" + argsJson(args)));
}

void Timeline::span(const std::string& tensor, const std::string& phase, std::chrono::steady_clock::time_point start,
                    std::chrono::steady_clock::time_point end) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  const int64_t ts = duration_cast<microseconds>(start - origin_).count();
  const int64_t dur = std::max<int64_t>(0, duration_cast<microseconds>(end - start).count());
  write(tensor, "\"tid\":1,\"ph\":\"X\",\"name\":" + quote(phase) + ",\"ts\":" + std::to_string(ts) +
                    ",\"dur\":" + std::to_string(dur));
}

void Timeline::instant(const std::string& tensor, const std::string& what, const Args& args) {
  write(tensor, "\"tid\":0,\"ph\":\"i\",\"s\":\"p\",\"name\":" + quote(what) +
                    ",\"ts\":" + std::to_string(nowMicros()) + (args.empty() ? "" : ",\"args\":" + argsJson(args)));
}

void Timeline::cycle() {
  if (mark_cycles_) instant("cycles", "CYCLE_START");
}

uint64_t Timeline::events() const {
  MutexLock lock(mutex_);
  return events_;
}

std::string Timeline::error() const {
  MutexLock lock(mutex_);
  return error_;
}

}  // namespace gradsync::timeline
