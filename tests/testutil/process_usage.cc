// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/process_usage.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>

namespace gradsync::testutil {
namespace {

int entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

}  // namespace

Usage usageOf(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  Usage u;
  u.fds = entries(proc + "/fd");
  u.threads = entries(proc + "/task");
  std::ifstream maps(proc + "/maps");
  for (std::string line; std::getline(maps, line);) {
    ++u.mappings;
    u.memfd_mappings += line.find("/memfd:") != std::string::npos;
  }
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::atol(line.c_str() + 6);
  }
  return u;
}

std::string describe(const Usage& u) {
  return std::to_string(u.fds) + " fds, " + std::to_string(u.threads) + " threads, " + std::to_string(u.mappings) +
         " mappings (" + std::to_string(u.memfd_mappings) + " memfd), " + std::to_string(u.rss_kib / 1024) +
         " MiB resident";
}

}  // namespace gradsync::testutil
