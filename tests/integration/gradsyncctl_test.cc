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

TEST(GradsyncctlTest, StatusAndJobsOfARunningDaemon) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--fusion-threshold-bytes", "1048576"}, &error)) << error;
  CtlRun status = daemon.ctl({"status"});
  EXPECT_EQ(status.code, 0) << status.output;
  EXPECT_NE(status.output.find("version:"), std::string::npos) << status.output;
  EXPECT_TRUE(std::regex_search(status.output, std::regex("fusion_threshold_bytes: +1048576"))) << status.output;
  EXPECT_NE(status.output.find(daemon.socketPath()), std::string::npos);

  // A job with one collective in flight: rank 0 waits for rank 1, which waits to be killed.
  Process r0 = daemon.spawnRank("ctl-job", 0, 2, {"kill_victim"});
  Process r1 = daemon.spawnRank("ctl-job", 1, 2, {"kill_victim"});
  ASSERT_TRUE(waitFor([&] { return r0.log().find("ENQUEUED") != std::string::npos; }, std::chrono::seconds(20)));
  CtlRun jobs = daemon.ctl({"jobs"});
  EXPECT_EQ(jobs.code, 0) << jobs.output;
  EXPECT_NE(jobs.output.find("ctl-job"), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find(std::to_string(r0.pid())), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find(std::to_string(r1.pid())), std::string::npos) << jobs.output;
  CtlRun json = daemon.ctl({"--json", "jobs"});
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
  CtlRun outside = daemon.ctl({"timeline", "tl-job", "start", "../escape.json"});
  EXPECT_EQ(outside.code, 1) << outside.output;
  EXPECT_NE(outside.output.find("a name inside the daemon's timeline_dir"), std::string::npos) << outside.output;
  CtlRun start = daemon.ctl({"timeline", "tl-job", "start", "t.json"});
  EXPECT_EQ(start.code, 0) << start.output;
  EXPECT_NE(start.output.find(timelines.path() + "/t.json"), std::string::npos) << start.output;
  const auto steps = [&] { return ranks[0].log().size(); };
  const size_t before = steps();
  ASSERT_TRUE(waitFor([&] { return steps() > before + 200; }, std::chrono::seconds(20)));  // some steps recorded
  CtlRun stop = daemon.ctl({"timeline", "tl-job", "stop"});
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
  CtlRun missing = daemon.ctl({"timeline", "no-such-job", "stop"});
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_EQ(daemon.stop(), 0);
}

// What is waiting for whom: each side of a job submitted a collective the
// other has not.
TEST(GradsyncctlTest, TensorsNameTheRanksThatHaveNotSubmitted) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({}, &error)) << error;
  Process r0 = daemon.spawnRank("wait-job", 0, 2, {"kill_victim"});
  Process r1 = daemon.spawnRank("wait-job", 1, 2, {"kill_victim"});
  ASSERT_TRUE(waitFor([&] { return r1.log().find("VICTIM READY") != std::string::npos; }, std::chrono::seconds(20)));
  ASSERT_TRUE(waitFor([&] { return r0.log().find("ENQUEUED") != std::string::npos; }, std::chrono::seconds(20)));
  CtlRun tensors = daemon.ctl({"tensors", "wait-job"});
  EXPECT_EQ(tensors.code, 0) << tensors.output;
  EXPECT_NE(tensors.output.find("job wait-job: 2 in flight, 2 waiting for ranks"), std::string::npos) << tensors.output;
  EXPECT_TRUE(std::regex_search(tensors.output, std::regex("pending +[0-9]+s  submitted \\[0\\]  missing \\[1\\]")))
      << tensors.output;
  EXPECT_TRUE(std::regex_search(tensors.output, std::regex("only.rank1 +[0-9]+s  submitted \\[1\\]  missing \\[0\\]")))
      << tensors.output;
  CtlRun json = daemon.ctl({"--json", "tensors"});
  EXPECT_NE(json.output.find("\"missing_ranks\":[1]"), std::string::npos) << json.output;
  EXPECT_EQ(daemon.ctl({"tensors", "no-such-job"}).code, 1);
  r1.kill(SIGKILL);
  EXPECT_EQ(r0.wait(std::chrono::seconds(10)), 0) << r0.log();
  EXPECT_EQ(daemon.stop(), 0);
}

// stats and top read the job's counters while it runs.
TEST(GradsyncctlTest, StatsAndTopDuringAJob) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({}, &error)) << error;
  const std::string stop_file = daemon.dir() + "/loop.stop";
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("top-job", r, 2, {"campaign_loop", stop_file}));
  ASSERT_TRUE(waitFor([&] { return ranks[1].log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(20)));
  CtlRun stats = daemon.ctl({"stats", "top-job"});
  EXPECT_EQ(stats.code, 0) << stats.output;
  EXPECT_TRUE(std::regex_search(stats.output, std::regex("allreduce +float32 +[1-9][0-9]* "))) << stats.output;
  EXPECT_NE(stats.output.find("phases:"), std::string::npos) << stats.output;
  // Two screens half a second apart, each with its interval's rates.
  CtlRun top = daemon.ctl({"top", "--interval", "0.5", "--count", "2"});
  EXPECT_EQ(top.code, 0) << top.output;
  const size_t second = top.output.find("gradsyncd ", top.output.find("gradsyncd ") + 1);
  ASSERT_NE(second, std::string::npos) << top.output;
  const std::string screen = top.output.substr(second);
  EXPECT_NE(screen.find("OPS/S"), std::string::npos) << screen;
  EXPECT_TRUE(std::regex_search(screen, std::regex("top-job +2/2 +[0-9]*[1-9][0-9]*\\.[0-9] "))) << screen;
  std::fclose(std::fopen(stop_file.c_str(), "w"));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(20), &report)) << report;
  EXPECT_EQ(daemon.stop(), 0);
}

// A drain refuses new jobs, reports the Control service NOT_SERVING, lets
// the running job finish and ends the daemon; an undrain before that takes
// new jobs again.
TEST(GradsyncctlTest, DrainRefusesNewJobsAndExitsWhenTheLastEnds) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({}, &error)) << error;
  EXPECT_EQ(daemon.ctl({"health", "gradsync.v1.Control"}).output, "SERVING\n");
  const std::string stop_file = daemon.dir() + "/loop.stop";
  std::vector<Process> running;
  for (int r = 0; r < 2; ++r) running.push_back(daemon.spawnRank("long-job", r, 2, {"campaign_loop", stop_file}));
  ASSERT_TRUE(waitFor([&] { return running[1].log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(20)));

  CtlRun drain = daemon.ctl({"drain"});
  EXPECT_EQ(drain.code, 0) << drain.output;
  EXPECT_NE(drain.output.find("draining: no new jobs; 1 running"), std::string::npos) << drain.output;
  CtlRun health = daemon.ctl({"health", "gradsync.v1.Control"});
  EXPECT_EQ(health.code, 1) << health.output;
  EXPECT_EQ(health.output, "NOT_SERVING\n");
  EXPECT_EQ(daemon.ctl({"health"}).output, "SERVING\n") << "the daemon itself still serves";
  Process refused = daemon.spawnRank("new-job", 0, 1, {"allreduce"});
  EXPECT_NE(refused.wait(std::chrono::seconds(20)), 0);
  EXPECT_NE(refused.log().find("is draining"), std::string::npos) << refused.log();

  CtlRun undrain = daemon.ctl({"undrain"});
  EXPECT_EQ(undrain.code, 0) << undrain.output;
  EXPECT_EQ(daemon.ctl({"health", "gradsync.v1.Control"}).output, "SERVING\n");
  Process accepted = daemon.spawnRank("new-job", 0, 1, {"allreduce"});
  EXPECT_EQ(accepted.wait(std::chrono::seconds(20)), 0) << accepted.log();

  EXPECT_EQ(daemon.ctl({"drain"}).code, 0);
  EXPECT_TRUE(daemon.ctl({"status"}).output.find("draining:") != std::string::npos) << daemon.ctl({"status"}).output;
  std::fclose(std::fopen(stop_file.c_str(), "w"));
  std::string report;
  EXPECT_TRUE(allSucceed(running, std::chrono::seconds(20), &report)) << report;
  EXPECT_EQ(daemon.process().wait(std::chrono::seconds(10)), 0) << daemon.log();
  EXPECT_NE(daemon.log().find("drained: no job left; exiting"), std::string::npos) << daemon.log();
}

TEST(GradsyncctlTest, ClearErrorWhenTheDaemonIsNotRunning) {
  TempDir dir;
  CtlRun run = runCtl(dir.path(), {"--socket", dir.path() + "/absent.sock", "status"});
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("is the daemon running?"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace gradsync::testutil
