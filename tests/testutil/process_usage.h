// SPDX-License-Identifier: Apache-2.0
// What a process holds, from /proc: for tests that check a daemon returns
// to its baseline after many jobs.
#pragma once

#include <sys/types.h>

#include <string>

namespace gradsync::testutil {

struct Usage {
  int fds = 0, threads = 0, mappings = 0;
  int memfd_mappings = 0;  // of them, memfds: the ranks' arenas
  long rss_kib = 0;
};

Usage usageOf(pid_t pid);
// "12 fds, 30 threads, 400 mappings (2 memfd), 25 MiB resident"
std::string describe(const Usage& usage);

}  // namespace gradsync::testutil
