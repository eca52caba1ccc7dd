// SPDX-License-Identifier: Apache-2.0
// Many short jobs through one daemon (a third succeed, a third fail
// collectives on disagreements, a third lose a rank to SIGKILL): afterwards
// the daemon's file descriptors, threads, memory mappings and resident
// memory are back at their baseline. GRADSYNC_SOAK_JOBS sets the number of
// jobs (default 2,000: about a minute here).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"
#include "tests/testutil/process_usage.h"

namespace gradsync::testutil {
namespace {

constexpr int kRanks = 3;       // the disagreement scenario needs three
constexpr int kConcurrent = 4;  // jobs at a time
// gRPC's synchronous server keeps a few more polling threads after busy
// moments (seen: +1 to +3 over 2,000 jobs); a leak of one per job would
// show thousands.
constexpr int kSpareThreads = 8;

// Starts job `i`: kind i % 3 picks success, failed collectives, or a rank
// killed mid-job.
std::vector<Process> startJob(const DaemonFixture& daemon, int i) {
  const std::string job = "soak-" + std::to_string(i);
  const int kind = i % 3;
  const char* scenario = kind == 0 ? "repeat_allreduce" : kind == 1 ? "mismatch_allreduce" : "campaign_loop";
  std::vector<Process> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(daemon.spawnRank(job, r, kRanks, {scenario}));
  return ranks;
}

// Waits for job `i`'s ranks; kills one rank of a kind-2 job once it runs.
// Returns an empty string or what went wrong.
std::string finishJob(std::vector<Process>& ranks, int i) {
  if (i % 3 == 2) {
    if (!waitFor([&] { return ranks[0].log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(30))) {
      return "job " + std::to_string(i) + " never ran: " + ranks[0].log();
    }
    ranks[1].kill(SIGKILL);
  }
  for (int r = 0; r < kRanks; ++r) {
    const int code = ranks[r].wait(std::chrono::seconds(30));
    const int want = i % 3 != 2 ? 0 : r == 1 ? 128 + SIGKILL : 3;
    if (code != want) {
      return "job " + std::to_string(i) + " rank " + std::to_string(r) + " exited " + std::to_string(code) + " (want " +
             std::to_string(want) + "): " + ranks[r].log();
    }
  }
  return "";
}

std::string runJobs(const DaemonFixture& daemon, int first, int count) {
  for (int i = first; i < first + count; i += kConcurrent) {
    std::vector<std::vector<Process>> running;
    for (int j = i; j < std::min(first + count, i + kConcurrent); ++j) running.push_back(startJob(daemon, j));
    for (size_t k = 0; k < running.size(); ++k) {
      const std::string error = finishJob(running[k], i + static_cast<int>(k));
      if (!error.empty()) return error;
    }
  }
  return "";
}

TEST(SoakTest, ShortJobsLeaveNoDescriptorsThreadsMappingsOrMemoryBehind) {
  // Under a sanitizer (set by --config=asan/tsan) jobs are several times
  // slower and the sanitizer's own memory grows with them: fewer jobs, and
  // only descriptors and threads are compared.
  const bool sanitized = std::getenv("GRADSYNC_SANITIZER") != nullptr;
  const int jobs = envInt("GRADSYNC_SOAK_JOBS", sanitized ? 300 : 2000);
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--stall-warning-seconds", "5", "--stall-deadline-seconds", "20"}, &error)) << error;
  const pid_t pid = daemon.process().pid();
  // Warm-up (thread pools, allocator arenas, gRPC's own state), then the
  // baseline with no job left.
  ASSERT_EQ(runJobs(daemon, 0, 2 * kConcurrent), "") << daemon.log();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const Usage baseline = usageOf(pid);

  const auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(runJobs(daemon, 2 * kConcurrent, jobs), "") << daemon.log();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // Sessions and jobs end asynchronously once their ranks exit: allow a
  // moment, then compare. Descriptors and mappings must return exactly
  // (give or take the allocator's per-thread arenas); threads too, give or
  // take gRPC's spare pollers; resident memory within what the allocator keeps.
  Usage after;
  waitFor(
      [&] {
        after = usageOf(pid);
        return after.fds <= baseline.fds && after.threads <= baseline.threads + kSpareThreads;
      },
      std::chrono::seconds(10));
  std::printf("soak: %d jobs in %.1f s; baseline %s; after %s\n", jobs, seconds, describe(baseline).c_str(),
              describe(after).c_str());
  EXPECT_LE(after.fds, baseline.fds) << describe(after);
  EXPECT_LE(after.threads, baseline.threads + kSpareThreads) << describe(after);
  if (!sanitized) {
    EXPECT_LE(after.mappings, baseline.mappings + 16) << describe(after);
    EXPECT_LE(after.rss_kib, baseline.rss_kib + 64 * 1024) << describe(after);
  }
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

}  // namespace
}  // namespace gradsync::testutil
