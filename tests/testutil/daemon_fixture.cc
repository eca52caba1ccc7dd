// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/daemon_fixture.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>

#include "gtest/gtest.h"

namespace gradsync::testutil {
namespace {

bool accepts(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// `base`.log, or `base`.N.log for the Nth process of that name: a
// replacement rank spawned under a dead one's number writes its own log.
std::string freshLogPath(const std::string& base) {
  std::string path = base + ".log";
  for (int n = 2; ::access(path.c_str(), F_OK) == 0; ++n) path = base + "." + std::to_string(n) + ".log";
  return path;
}

}  // namespace

bool DaemonFixture::start(const std::vector<std::string>& extra_flags, std::string* error) {
  return startWrapped({}, {}, extra_flags, error);
}

bool DaemonFixture::startWrapped(const std::vector<std::string>& wrapper, const std::map<std::string, std::string>& env,
                                 const std::vector<std::string>& extra_flags, std::string* error) {
  socket_ = dir_.path() + "/d.sock";
  std::vector<std::string> argv = wrapper;
  for (const std::string& a : {runfile(binary_), std::string("--socket-path"), socket_}) argv.push_back(a);
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  process_ = Process::spawn(argv, env, dir_.path() + "/daemon.log");
  // A daemon that exits at start (a bad flag, a port in use) ends the wait.
  running_ =
      waitFor([&] { return accepts(socket_) || !process_.running(); }, std::chrono::seconds(10)) && process_.running();
  if (!running_ && error) *error = "gradsyncd did not start:\n" + process_.log();
  return running_;
}

int DaemonFixture::stop() {
  if (!running_) return -1;
  running_ = false;
  process_.kill(SIGTERM);
  // A daemon that does not exit in time: its threads' stacks go to the
  // test's log before it is killed (where gdb is installed).
  if (!waitFor([&] { return !process_.running(); }, std::chrono::seconds(8)) && ::access("/usr/bin/gdb", X_OK) == 0) {
    const std::string stacks = dir_.path() + "/stacks.txt";
    const std::string command =
        "/usr/bin/gdb -batch -p " + std::to_string(process_.pid()) + " -ex 'thread apply all bt' > " + stacks + " 2>&1";
    (void)!std::system(command.c_str());
    std::ifstream in(stacks);
    std::fprintf(stderr, "gradsyncd (%s) still runs 8 s after SIGTERM; its threads:\n%s\n", socket_.c_str(),
                 std::string(std::istreambuf_iterator<char>(in), {}).c_str());
  }
  return process_.wait(std::chrono::seconds(2));
}

int DaemonFixture::waitForExit(std::chrono::milliseconds timeout) {
  running_ = false;
  return process_.wait(timeout);
}

DaemonFixture::~DaemonFixture() {
  if (!running_) return;  // stopped by the test, which checked how
  const bool exited_before = !process_.running();
  const int code = stop();
  // Killed by the test (it SIGKILLs daemons to test their loss).
  if (exited_before && code == 128 + SIGKILL) return;
  // Every other daemon exits cleanly at SIGTERM: a crash, an unclean
  // shutdown, or a leak or UB report under the sanitizers fails the test.
  EXPECT_EQ(code, 0) << "gradsyncd (" << socket_ << ") did not exit cleanly at the end of the test: "
                     << (exited_before ? "it had exited already" : "at SIGTERM") << " with code " << code << "\n"
                     << log();
}

std::map<std::string, std::string> DaemonFixture::rankEnv(const std::string& job, int rank, int size,
                                                          const std::string& token) const {
  return {{"GRADSYNC_SOCKET", socket_},
          {"GRADSYNC_JOB_ID", job},
          {"GRADSYNC_TOKEN", token},
          {"GRADSYNC_RANK", std::to_string(rank)},
          {"GRADSYNC_SIZE", std::to_string(size)},
          {"GRADSYNC_LOCAL_RANK", std::to_string(rank)},
          {"GRADSYNC_LOCAL_SIZE", std::to_string(size)},
          {"GRADSYNC_ARENA_BYTES", std::to_string(256 << 20)}};
}

Process DaemonFixture::spawnRank(const std::string& job, int rank, int size, const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& extra_env) const {
  auto env = rankEnv(job, rank, size);
  for (const auto& [k, v] : extra_env) env[k] = v;
  std::vector<std::string> argv = {runfile("tests/integration/worker")};
  argv.insert(argv.end(), args.begin(), args.end());
  return Process::spawn(argv, env, freshLogPath(dir_.path() + "/" + job + ".rank" + std::to_string(rank)));
}

CtlRun runCtl(const std::string& dir, const std::vector<std::string>& args) {
  static std::atomic<int> runs{0};
  std::vector<std::string> argv = {runfile("tools/gradsyncctl/gradsyncctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p = Process::spawn(argv, {}, dir + "/ctl" + std::to_string(runs++) + ".log");
  const int code = p.wait(std::chrono::seconds(20));
  return {code, p.log()};
}

CtlRun DaemonFixture::ctl(const std::vector<std::string>& args) const {
  std::vector<std::string> all = {"--socket", socket_};
  all.insert(all.end(), args.begin(), args.end());
  return runCtl(dir(), all);
}

std::string DaemonFixture::peerAddress() const {
  std::smatch match;
  const std::string text = log();
  static const std::regex pattern("peer service on ([0-9.]+:[0-9]+)");
  return std::regex_search(text, match, pattern) ? match[1].str() : "";
}

std::vector<Process> launchAcross(const std::vector<const DaemonFixture*>& daemons, const std::string& job,
                                  const std::vector<std::string>& args, const std::vector<int>& placement,
                                  const std::set<int>& absent, const std::map<std::string, std::string>& extra_env) {
  const int size = static_cast<int>(placement.size());
  const std::string leader = daemons[placement[0]]->peerAddress();
  std::vector<Process> ranks;
  for (int r = 0; r < size; ++r) {
    if (absent.count(r)) continue;
    const DaemonFixture& d = *daemons[placement[r]];
    int local_rank = 0, local_size = 0;
    for (int q = 0; q < size; ++q) {
      if (placement[q] != placement[r]) continue;
      if (q < r) ++local_rank;
      ++local_size;
    }
    auto env = d.rankEnv(job, r, size);
    env["GRADSYNC_LOCAL_RANK"] = std::to_string(local_rank);
    env["GRADSYNC_LOCAL_SIZE"] = std::to_string(local_size);
    env["GRADSYNC_LEADER"] = leader;
    for (const auto& [key, value] : extra_env) env[key] = value;
    ranks.push_back(d.spawnRank(job, r, size, args, env));
  }
  return ranks;
}

bool allSucceed(std::vector<Process>& processes, std::chrono::milliseconds timeout, std::string* report) {
  bool ok = true;
  for (auto& p : processes) {
    const pid_t pid = p.pid();
    const int code = p.wait(timeout);
    if (code != 0) {
      ok = false;
      *report += "process " + std::to_string(pid) + " exited with " + std::to_string(code) +
                 (code == -1 ? " (timed out, killed)" : "") + "; its output:\n" + p.log() + "\n";
    }
  }
  return ok;
}

}  // namespace gradsync::testutil
