// SPDX-License-Identifier: Apache-2.0
// gradsyncctl against a real daemon with a job in flight, and without one.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

struct CtlRun {
  int code;
  std::string output;
};

CtlRun ctl(const std::string& dir, const std::vector<std::string>& args) {
  static int n = 0;
  std::vector<std::string> argv = {runfile("tools/gradsyncctl/gradsyncctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p = Process::spawn(argv, {}, dir + "/ctl" + std::to_string(n++) + ".log");
  const int code = p.wait(std::chrono::seconds(20));
  return {code, p.log()};
}

TEST(GradsyncctlTest, StatusAndJobsOfARunningDaemon) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--fusion-threshold-bytes", "1048576"}, &error)) << error;
  CtlRun status = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "status"});
  EXPECT_EQ(status.code, 0) << status.output;
  EXPECT_NE(status.output.find("version:"), std::string::npos) << status.output;
  EXPECT_TRUE(std::regex_search(status.output, std::regex("fusion_threshold_bytes: +1048576"))) << status.output;
  EXPECT_NE(status.output.find(daemon.socketPath()), std::string::npos);

  // A job with one collective in flight: rank 0 waits for rank 1, which waits to be killed.
  Process r0 = daemon.spawnRank("ctl-job", 0, 2, {"kill_victim"});
  Process r1 = daemon.spawnRank("ctl-job", 1, 2, {"kill_victim"});
  ASSERT_TRUE(waitFor([&] { return r0.log().find("ENQUEUED") != std::string::npos; }, std::chrono::seconds(20)));
  CtlRun jobs = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "jobs"});
  EXPECT_EQ(jobs.code, 0) << jobs.output;
  EXPECT_NE(jobs.output.find("ctl-job"), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find(std::to_string(r0.pid())), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find(std::to_string(r1.pid())), std::string::npos) << jobs.output;
  CtlRun json = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "--json", "jobs"});
  EXPECT_EQ(json.code, 0) << json.output;
  EXPECT_NE(json.output.find("\"job_id\":\"ctl-job\""), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"tensors_in_flight\":2"), std::string::npos) << json.output;  // pending + only.rank1
  r1.kill(SIGKILL);
  EXPECT_EQ(r0.wait(std::chrono::seconds(10)), 0) << r0.log();
  EXPECT_EQ(daemon.stop(), 0);
}

// An operator starts and stops a running job's timeline; the daemon writes
// it into its timeline_dir (never elsewhere).
TEST(GradsyncctlTest, TimelineOfARunningJob) {
  DaemonFixture daemon;
  std::string error;
  TempDir timelines;
  ASSERT_TRUE(daemon.start({"--timeline-dir", timelines.path()}, &error)) << error;
  const std::string stop_file = daemon.dir() + "/loop.stop";
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("tl-job", r, 2, {"campaign_loop", stop_file}));
  ASSERT_TRUE(waitFor([&] { return ranks[1].log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(20)));
  CtlRun outside = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "timeline", "tl-job", "start", "../escape.json"});
  EXPECT_EQ(outside.code, 1) << outside.output;
  EXPECT_NE(outside.output.find("a name inside the daemon's timeline_dir"), std::string::npos) << outside.output;
  CtlRun start = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "timeline", "tl-job", "start", "t.json"});
  EXPECT_EQ(start.code, 0) << start.output;
  EXPECT_NE(start.output.find(timelines.path() + "/t.json"), std::string::npos) << start.output;
  const auto steps = [&] { return ranks[0].log().size(); };
  const size_t before = steps();
  ASSERT_TRUE(waitFor([&] { return steps() > before + 200; }, std::chrono::seconds(20)));  // some steps recorded
  CtlRun stop = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "timeline", "tl-job", "stop"});
  EXPECT_EQ(stop.code, 0) << stop.output;
  std::fclose(std::fopen(stop_file.c_str(), "w"));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(20), &report)) << report;
  std::ifstream in(timelines.path() + "/t.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  EXPECT_EQ(json.rfind("[\n", 0), 0u) << json.substr(0, 200);
  EXPECT_EQ(json.back(), ']');
  EXPECT_NE(json.find(R"("args":{"name":"campaign.big"})"), std::string::npos);
  EXPECT_NE(json.find(R"("name":"NEGOTIATE_ALLREDUCE")"), std::string::npos);
  EXPECT_NE(json.find(R"("name":"ALLREDUCE","ts":)"), std::string::npos);
  CtlRun missing = ctl(daemon.dir(), {"--socket", daemon.socketPath(), "timeline", "no-such-job", "stop"});
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(GradsyncctlTest, ClearErrorWhenTheDaemonIsNotRunning) {
  TempDir dir;
  CtlRun run = ctl(dir.path(), {"--socket", dir.path() + "/absent.sock", "status"});
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("is the daemon running?"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace gradsync::testutil
