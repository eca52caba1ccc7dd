// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

namespace gradsync::testutil {

Process Process::spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       const std::string& log_path) {
  Process p;
  p.log_path_ = log_path;
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  p.pid_ = pid;
  return p;
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), log_path_(std::move(other.log_path_)), status_(other.status_) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    this->~Process();
    pid_ = std::exchange(other.pid_, -1);
    log_path_ = std::move(other.log_path_);
    status_ = other.status_;
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

bool Process::reaped() {
  if (pid_ <= 0) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  pid_ = -1;
  status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

int Process::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (reaped()) return status_;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Process::kill(int signo) {
  if (pid_ > 0) ::kill(pid_, signo);
}

bool Process::pause(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return false;
  ::kill(pid_, SIGSTOP);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG | WUNTRACED) == pid_) {
      if (WIFSTOPPED(status)) return true;  // the whole group has stopped
      pid_ = -1;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string Process::log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TempDir::TempDir() {
  char pattern[] = "/tmp/gs-test.XXXXXX";
  path_ = ::mkdtemp(pattern);
}

TempDir::~TempDir() {
  if (!path_.empty() && std::system(("rm -rf '" + path_ + "'").c_str()) != 0)
    std::fprintf(stderr, "cannot remove %s\n", path_.c_str());
}

std::string runfile(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return relative;
  return std::string(srcdir) + "/" + (workspace ? workspace : "gradsync") + "/" + relative;
}

bool waitFor(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

char processState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

double timeScale() {
  const char* value = std::getenv("GRADSYNC_TEST_TIME_SCALE");
  const double scale = value != nullptr ? std::atof(value) : 0;
  return scale >= 1 ? scale : 1;
}

}  // namespace gradsync::testutil
