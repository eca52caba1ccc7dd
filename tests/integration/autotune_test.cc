// SPDX-License-Identifier: Apache-2.0
// Autotune end to end: a training loop whose ranks ask for it
// (GRADSYNC_AUTOTUNE=1 with small samples) on one daemon and across two,
// where the leader tunes and every daemon must fuse each batch alike (the
// workers check every sum while the threshold changes under them); what
// it chose in the log and in `gradsyncctl jobs`.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>

#include "gtest/gtest.h"
#include "tests/integration/multi_daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr auto kTimeout = std::chrono::seconds(90);

// A sample of 2 steps, one warm-up sample, one sample per setting.
const std::map<std::string, std::string> kQuickTuning = {
    {"GRADSYNC_AUTOTUNE", "1"},
    {"GRADSYNC_AUTOTUNE_WARMUP_SAMPLES", "1"},
    {"GRADSYNC_AUTOTUNE_STEPS_PER_SAMPLE", "2"},
    {"GRADSYNC_AUTOTUNE_SAMPLES_PER_SETTING", "1"},
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool allPrinted(const std::vector<Process>& ranks, const std::string& what) {
  for (const auto& r : ranks) {
    if (r.log().find(what) == std::string::npos) return false;
  }
  return true;
}

class AutotuneTest : public MultiDaemonTest {
 protected:
  // Runs 30 training steps of `job` placed by `placement`, waits until the
  // ranks are done, and returns `gradsyncctl jobs` of each daemon while the
  // ranks still hold the job; the ranks then leave and must all succeed.
  std::vector<std::string> trainAndLook(const std::string& job, const std::vector<int>& placement,
                                        std::map<std::string, std::string> env = kQuickTuning) {
    const std::string stop = daemons_[0]->dir() + "/" + job + ".stop";
    auto ranks = launchWith(job, {"training_steps", "30", stop}, placement, env);
    const bool done = waitFor([&] { return allPrinted(ranks, "STEPS DONE"); }, kTimeout);
    std::vector<std::string> views;
    for (const auto& d : daemons_) views.push_back(d->ctl({"jobs"}).output);
    std::ofstream(stop).flush();
    std::string report;
    EXPECT_TRUE(done) << logs();
    EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
    return views;
  }
};

// One daemon: 6 thresholds, then 5 cycle times (one of each already
// measured): 10 settings after a warm-up sample. The chosen setting is
// logged, each measured one too, and gradsyncctl shows them.
TEST_F(AutotuneTest, OneDaemonTriesEverySettingAndKeepsTheFastest) {
  startDaemons(1);
  auto views = trainAndLook("tune-one", {0, 0});
  const std::string log = daemons_[0]->log();
  EXPECT_EQ(count(log, "job 'tune-one': autotune measured "), 10) << log;
  std::smatch chosen;
  ASSERT_TRUE(
      std::regex_search(log, chosen,
                        std::regex("job 'tune-one': autotune chose fusion threshold ([^,]+), cycle time ([0-9.]+) "
                                   "ms \\(([0-9.e+]+) MB/s; the initial fusion threshold 64 MiB, cycle time 0 "
                                   "ms: [0-9.e+]+ MB/s\\) after 11 samples")))
      << log;
  EXPECT_NE(views[0].find("autotune:           done after 11 samples: "), std::string::npos) << views[0];
  EXPECT_NE(views[0].find("autotune trials (median of each setting's samples):"), std::string::npos) << views[0];
  // The choice is the fastest setting measured (each was measured once).
  const std::regex measured(
      "job 'tune-one': autotune measured fusion threshold ([^,]+), cycle time ([0-9.]+) ms: "
      "([0-9.]+) MB/s");
  double fastest = -1;
  std::string fastest_threshold, fastest_cycle;
  for (std::sregex_iterator it(log.begin(), log.end(), measured), end; it != end; ++it) {
    const double mbps = std::stod((*it)[3].str());
    if (mbps > fastest) {
      fastest = mbps;
      fastest_threshold = (*it)[1].str();
      fastest_cycle = (*it)[2].str();
    }
  }
  EXPECT_DOUBLE_EQ(std::stod(chosen[3].str()), fastest) << log;
  EXPECT_EQ(chosen[1].str(), fastest_threshold) << log;
  EXPECT_EQ(chosen[2].str(), fastest_cycle) << log;
  // The setting in force is the one logged.
  const std::string threshold = chosen[1].str() == "none" ? "no fusion" : "up to ";
  EXPECT_NE(views[0].find("fusion:             " + threshold), std::string::npos) << views[0];
  EXPECT_NE(views[0].find(", cycle " + chosen[2].str() + " ms\n"), std::string::npos) << views[0];
}

// Two daemons in the steady-state rounds (the default): the leader tunes
// the threshold (the rounds have no cycle to tune: 6 settings) and sends it
// with its batches and rounds; the follower fuses as told and says so.
// Rank 0 writes every measurement and the choice to GRADSYNC_AUTOTUNE_LOG
// (every rank is given the path; the others write nothing).
TEST_F(AutotuneTest, TwoDaemonsFuseAsTheLeaderTunes) {
  startDaemons(2);
  auto env = kQuickTuning;
  const std::string csv = daemons_[0]->dir() + "/autotune.csv";
  env["GRADSYNC_AUTOTUNE_LOG"] = csv;
  auto views = trainAndLook("tune-two", {0, 1, 0, 1}, env);
  const std::string log = daemons_[0]->log();
  EXPECT_EQ(count(log, "job 'tune-two': autotune measured "), 6) << log;
  EXPECT_NE(log.find("job 'tune-two': autotune chose fusion threshold "), std::string::npos) << log;
  std::ifstream in(csv);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u) << "header, 6 measurements, the choice";
  EXPECT_EQ(lines[0], "fusion_threshold_bytes,cycle_time_ms,bytes_per_second,phase");
  // The first measurement is the initial setting (64 MiB); the rounds have
  // no cycle to tune, so every line has the same cycle time.
  const std::regex measured("([0-9]+),([0-9.]+),([0-9]+\\.[0-9]),fusion threshold");
  std::smatch first;
  ASSERT_TRUE(std::regex_match(lines[1], first, measured)) << lines[1];
  EXPECT_EQ(first[1].str(), "67108864");
  double fastest = 0;
  for (size_t i = 1; i < 7; ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, measured)) << lines[i];
    EXPECT_EQ(m[2].str(), first[2].str()) << lines[i];
    fastest = std::max(fastest, std::stod(m[3].str()));
  }
  // The choice is the fastest setting measured.
  std::smatch chose;
  ASSERT_TRUE(std::regex_match(lines[7], chose, std::regex("([0-9]+),([0-9.]+),([0-9]+\\.[0-9]),chose"))) << lines[7];
  EXPECT_NEAR(std::stod(chose[3].str()), fastest, 0.1) << lines[7];
  EXPECT_NE(log.find("after 7 samples"), std::string::npos) << log;
  EXPECT_EQ(daemons_[1]->log().find("autotune measured"), std::string::npos) << daemons_[1]->log();
  EXPECT_NE(views[0].find("done after 7 samples"), std::string::npos) << views[0];
  EXPECT_NE(views[1].find("autotune:           the leader tunes\n"), std::string::npos) << views[1];
  EXPECT_NE(views[1].find("(the leader's)\n"), std::string::npos) << views[1];
}

// Every collective through the leader (--steady-state leader): the cycle
// time is the leader's wait for more collectives, tuned too.
TEST_F(AutotuneTest, TwoDaemonsThroughTheLeaderTuneTheCycleTimeToo) {
  startDaemons(2, {"--steady-state", "leader"});
  trainAndLook("tune-leader", {0, 1});
  const std::string log = daemons_[0]->log();
  EXPECT_EQ(count(log, "job 'tune-leader': autotune measured "), 10) << log;
  EXPECT_NE(log.find("cycle time 5 ms: "), std::string::npos) << log;  // the longest wait was tried
  EXPECT_NE(log.find("job 'tune-leader': autotune chose "), std::string::npos) << log;
}

// A rank killed while the leader tunes (thresholds changing, rounds in
// flight): the other ranks' collectives fail within seconds, naming it,
// on both daemons; nothing waits for the lost rank.
TEST_F(AutotuneTest, ARankKilledWhileTuningFailsTheJobEverywhereNamingIt) {
  startDaemons(2);
  auto ranks = launchWith("tune-kill", {"training_steps", "100000"}, {0, 1, 0, 1}, kQuickTuning);
  ASSERT_TRUE(waitFor(
      [&] { return daemons_[0]->log().find("job 'tune-kill': autotune measured ") != std::string::npos; }, kTimeout))
      << logs();
  ranks[3].kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  for (int r : {0, 1, 2}) {
    EXPECT_NE(ranks[r].wait(std::chrono::seconds(20)), 0) << "rank " << r << "\n" << ranks[r].log();
    EXPECT_NE(ranks[r].log().find("rank 3"), std::string::npos) << ranks[r].log();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(20)) << logs();
}

// The config turns it on for every job; a job's ranks may turn it off.
// Ranks that disagree cannot form one job.
TEST_F(AutotuneTest, ConfigTurnsItOnRanksTurnItOffAndMustAgree) {
  startDaemons(1, {"--autotune", "true"});
  auto off = launchWith("tune-off", {"training_steps", "3"}, {0, 0}, {{"GRADSYNC_AUTOTUNE", "0"}});
  std::string report;
  EXPECT_TRUE(allSucceed(off, kTimeout, &report)) << report;
  const std::string stop = daemons_[0]->dir() + "/on.stop";
  auto on = launchWith("tune-on", {"training_steps", "3", stop}, {0, 0}, {});
  ASSERT_TRUE(waitFor([&] { return allPrinted(on, "STEPS DONE"); }, kTimeout)) << logs();
  const std::string view = daemons_[0]->ctl({"jobs"}).output;
  EXPECT_NE(view.find("autotune:           warming up, sample 0 of 53"), std::string::npos) << view;
  std::ofstream(stop).flush();
  EXPECT_TRUE(allSucceed(on, kTimeout, &report)) << report;

  auto mixed = launchAcross({daemons_[0].get()}, "tune-mixed", {"training_steps", "3"}, {0, 0}, {1},
                            {{"GRADSYNC_AUTOTUNE", "1"}});
  ASSERT_TRUE(waitFor([&] { return daemons_[0]->ctl({"jobs"}).output.find("tune-mixed") != std::string::npos; },
                      std::chrono::seconds(20)));
  auto odd = daemons_[0]->spawnRank("tune-mixed", 1, 2, {"training_steps", "3"},
                                    {{"GRADSYNC_AUTOTUNE", "0"}, {"GRADSYNC_LEADER", leader_}});
  EXPECT_NE(odd.wait(std::chrono::seconds(20)), 0);
  EXPECT_NE(odd.log().find("asks for different autotune settings (GRADSYNC_AUTOTUNE*) than the ranks before it"),
            std::string::npos)
      << odd.log();
  EXPECT_EQ(daemons_[0]->log().find("job 'tune-off': autotune"), std::string::npos);
}

}  // namespace
}  // namespace gradsync::testutil
