// SPDX-License-Identifier: Apache-2.0
// A real gradsyncd for a test: started on sockets in a private directory,
// stopped with SIGTERM at the end, where it must exit 0 (a test failure
// otherwise) unless the test SIGKILLed it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/testutil/process.h"

namespace gradsync::testutil {

// A gradsyncctl run: its exit code and its output (stdout and stderr).
struct CtlRun {
  int code;
  std::string output;
};
// Runs gradsyncctl (a runfile of the test) with `args`, its log in `dir`;
// at most 20 s.
CtlRun runCtl(const std::string& dir, const std::vector<std::string>& args);

class DaemonFixture {
 public:
  // Starts gradsyncd with `extra_flags`; returns false (and the log in
  // `error`) when its socket does not accept connections within 10 s.
  bool start(const std::vector<std::string>& extra_flags, std::string* error);
  // The same, run under `wrapper` (e.g. {"ip", "netns", "exec", "ns"}) with
  // `env` added to its environment.
  bool startWrapped(const std::vector<std::string>& wrapper, const std::map<std::string, std::string>& env,
                    const std::vector<std::string>& extra_flags, std::string* error);
  // The daemon binary to start (a runfiles path), before start().
  void useBinary(std::string runfile_path) { binary_ = std::move(runfile_path); }
  // SIGTERM; returns the exit code (0 on a clean shutdown; -1, after
  // killing it, when it still runs 10 s later: its threads' stacks are
  // printed at 8 s).
  int stop();
  // The daemon exits on its own (the test made it: a signal of its own, a
  // fault); returns its exit code, or -1 (after killing it) when it still
  // runs after `timeout`.
  int waitForExit(std::chrono::milliseconds timeout);
  ~DaemonFixture();

  const std::string& socketPath() const { return socket_; }
  const std::string& dir() const { return dir_.path(); }
  std::string log() const { return process_.log(); }
  Process& process() { return process_; }
  // The peer service address the daemon logged ("" when it serves none).
  std::string peerAddress() const;
  // gradsyncctl --socket <this daemon> `args`.
  CtlRun ctl(const std::vector<std::string>& args) const;

  // Environment for rank `rank` of `size` of job `job`.
  std::map<std::string, std::string> rankEnv(const std::string& job, int rank, int size,
                                             const std::string& token = "secret-token") const;
  // Starts worker binary with `args` as rank `rank` of `size`, its output
  // in a log of its own.
  Process spawnRank(const std::string& job, int rank, int size, const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& extra_env = {}) const;

 private:
  TempDir dir_;
  std::string binary_ = "daemon/exe/gradsyncd";
  std::string socket_;
  Process process_;
  bool running_ = false;
};

// Starts worker `args` as the ranks of `job`, rank r on
// daemons[placement[r]] (local ranks in rank order); rank 0's daemon leads.
// Ranks in `absent` are not started (ranks that never come); `extra_env`
// is added to every rank's environment.
std::vector<Process> launchAcross(const std::vector<const DaemonFixture*>& daemons, const std::string& job,
                                  const std::vector<std::string>& args, const std::vector<int>& placement,
                                  const std::set<int>& absent = {},
                                  const std::map<std::string, std::string>& extra_env = {});

// Waits for every process; true when all exited 0. Appends their logs to
// `report` otherwise.
bool allSucceed(std::vector<Process>& processes, std::chrono::milliseconds timeout, std::string* report);

}  // namespace gradsync::testutil
