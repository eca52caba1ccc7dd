// SPDX-License-Identifier: Apache-2.0
// Child processes for multi-process tests: spawn with arguments and extra
// environment, capture output to a file, wait with a deadline, kill.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gradsync::testutil {

class Process {
 public:
  // Starts `argv[0]` with `argv`, the current environment plus `env`, stdout
  // and stderr appended to `log_path`.
  static Process spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       const std::string& log_path);
  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  ~Process();  // kills and reaps a child still running

  pid_t pid() const { return pid_; }
  const std::string& logPath() const { return log_path_; }
  // Waits for exit; returns the exit code, 128 + signal when killed, or -1
  // when still running at the deadline (the child is then killed).
  int wait(std::chrono::milliseconds timeout);
  // True while the child runs (it is reaped, and its code kept, once not).
  bool running() { return !reaped(); }
  void kill(int signo);
  // SIGSTOP, then waits until every thread of the child has stopped (a stop
  // signal wakes one thread, which stops the others a moment later: until
  // then the child can still act on what the test does next). False when
  // the child exited or did not stop by `timeout`.
  bool pause(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  std::string log() const;

 private:
  bool reaped();  // waits without blocking; true once the child is gone

  pid_t pid_ = -1;
  std::string log_path_;
  int status_ = -1;
};

// A directory under /tmp (short: Unix socket paths must fit 108 bytes),
// removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Path of a data dependency given as "package/target".
std::string runfile(const std::string& relative);

// The state letter of process `pid` in /proc/<pid>/stat ('R', 'S', 'T' when
// stopped, 'Z'...), or '?' when it cannot be read.
char processState(pid_t pid);

// The integer in environment variable `name`, or `fallback` when unset.
int envInt(const char* name, int fallback);

// The factor the tests' fixed time limits are multiplied by:
// $GRADSYNC_TEST_TIME_SCALE (scripts/sanitizers.sh sets it), else 1.
double timeScale();
inline double scaled(double seconds) { return seconds * timeScale(); }
inline std::chrono::milliseconds scaled(std::chrono::milliseconds limit) {
  return std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(limit.count()) * timeScale()));
}

// Polls `predicate` every millisecond until it holds or `timeout` passes.
bool waitFor(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);

}  // namespace gradsync::testutil
