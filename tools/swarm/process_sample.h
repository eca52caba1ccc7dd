// SPDX-License-Identifier: Apache-2.0
// A process's CPU time, threads and memory, as /proc tells them (the
// swarm's figures of the real daemons it runs against).
#pragma once

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace gradsync::swarm {

// A process as /proc tells it.
struct ProcessSample {
  double cpu_seconds = 0;
  int threads = 0;
  double rss_mib = 0;
  double peak_rss_mib = 0;
};

inline ProcessSample sample(int pid) {
  ProcessSample s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(text.substr(close + 2));
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    // After the name: state is field 3, utime 14 and stime 15 (1-based).
    if (f.size() > 13) s.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / ::sysconf(_SC_CLK_TCK);
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) s.rss_mib = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) s.peak_rss_mib = std::stod(line.substr(6)) / 1024;
  }
  return s;
}

}  // namespace gradsync::swarm
