// SPDX-License-Identifier: Apache-2.0
// One real leader (gradsyncd, its rank 0 running empty steps) and the swarm
// (tools/swarm) playing GRADSYNC_SWARM_FOLLOWERS follower daemons (256 by
// default), one rank each: the job forms, every step's requests are
// answered, the leader holds no thread per follower, and no coordination
// message passes 1 MiB; with slow rounds, held requests stay in them; with
// the leader lost, the swarm's followers elect a real candidate.
// Prints the swarm's figures.
#include <csignal>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

int envOr(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

double field(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(name + "=([0-9.]+)"))) return -1;
  return std::stod(m[1].str());
}

// What one run of the swarm against a real leader printed.
struct SwarmRun {
  std::string line;        // the swarm's figures
  std::string leader_log;  // the leader's whole log, its job's end line in it
  std::string ended;       // that end line
};

// Runs the swarm of `followers` (of `ranks_per_follower` ranks each)
// against a fresh leader (its rank 0 runs `steps` steps of `tensors` empty
// allreduces); fails the test on any error.
void runSwarm(int followers, int tensors, int steps, const std::vector<std::string>& swarm_flags, SwarmRun* run,
              int ranks_per_follower = 1) {
  DaemonFixture leader;
  std::string error;
  ASSERT_TRUE(leader.start({"--peer-address", "127.0.0.1:0", "--join-timeout-seconds", "120"}, &error)) << error;
  const std::string job = "swarm";
  std::vector<std::string> argv = {runfile("tools/swarm/swarm"),
                                   "--leader",
                                   leader.peerAddress(),
                                   "--leader-pid",
                                   std::to_string(leader.process().pid()),
                                   "--job",
                                   job,
                                   "--token",
                                   "secret-token",
                                   "--followers",
                                   std::to_string(followers),
                                   "--tensors",
                                   std::to_string(tensors),
                                   "--steps",
                                   std::to_string(steps),
                                   "--timeout-s",
                                   "240"};
  argv.insert(argv.end(), swarm_flags.begin(), swarm_flags.end());
  argv.insert(argv.end(), {"--ranks-per-follower", std::to_string(ranks_per_follower)});
  Process swarm = Process::spawn(argv, {}, leader.dir() + "/swarm.log");
  Process rank0 = leader.spawnRank(
      job, 0, followers * ranks_per_follower + 1, {"empty_steps", std::to_string(steps), std::to_string(tensors)},
      {{"GRADSYNC_LEADER", leader.peerAddress()}, {"GRADSYNC_LOCAL_RANK", "0"}, {"GRADSYNC_LOCAL_SIZE", "1"}});
  const int swarm_code = swarm.wait(std::chrono::seconds(270));
  const int rank0_code = rank0.wait(std::chrono::seconds(30));
  ASSERT_EQ(swarm_code, 0) << swarm.log() << "\n--- rank 0:\n" << rank0.log() << "\n--- leader:\n" << leader.log();
  ASSERT_EQ(rank0_code, 0) << rank0.log() << "\n--- leader:\n" << leader.log();
  std::smatch m;
  const std::string log = swarm.log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("SWARM [^\n]*"))) << log;
  run->line = m[0].str();
  std::printf("%s\n", run->line.c_str());
  ASSERT_TRUE(waitFor(
      [&] {
        run->leader_log = leader.log();
        return run->leader_log.find("job 'swarm' ended") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << run->leader_log;
  ASSERT_TRUE(std::regex_search(run->leader_log, m, std::regex("job 'swarm' ended: [^\n]*"))) << run->leader_log;
  run->ended = m[0].str();
  std::printf("%s\n", run->ended.c_str());
}

TEST(SwarmTest, FollowersOfOneRankEachStepAgainstOneLeader) {
  const int followers = envOr("GRADSYNC_SWARM_FOLLOWERS", 256);
  SwarmRun run;
  ASSERT_NO_FATAL_FAILURE(
      runSwarm(followers, envOr("GRADSYNC_SWARM_TENSORS", 161), envOr("GRADSYNC_SWARM_STEPS", 6), {}, &run));
  // No thread per follower at the leader, joining or joined.
  EXPECT_LT(field(run.line, "leader_threads"), 64) << run.line;
  EXPECT_LT(field(run.line, "leader_threads_joining"), 64) << run.line;
  EXPECT_LE(field(run.line, "largest_message"), 1 << 20) << run.line;
  // Cached steps went by rounds through the leader (the swarm has no data
  // plane): a small message per follower and round each way.
  EXPECT_NE(run.leader_log.find("cached collectives run after rounds through the leader among the " +
                                std::to_string(followers + 1) + " daemons"),
            std::string::npos)
      << run.leader_log;
  EXPECT_LT(field(run.line, "follower_tx_bytes_per_step"), 1024) << run.line;
}

// Followers of 8 ranks each (a node of 8 GPUs): each step's requests of
// all its ranks in one message, then one PART per round whatever its ranks.
TEST(SwarmTest, FollowersOfEightRanksEachStepAgainstOneLeader) {
  SwarmRun run;
  ASSERT_NO_FATAL_FAILURE(runSwarm(32, 161, 4, {}, &run, /*ranks_per_follower=*/8));
  EXPECT_EQ(field(run.line, "ranks_per_follower"), 8) << run.line;
  EXPECT_NE(run.leader_log.find("cached collectives run after rounds through the leader among the 33 daemons"),
            std::string::npos)
      << run.leader_log;
  EXPECT_NE(run.ended.find(" 483 collectives run after them"), std::string::npos) << run.leader_log;  // 3 x 161
  EXPECT_LT(field(run.line, "follower_tx_bytes_per_step"), 1024) << run.line;
}

// Rounds slower than the 200 ms a held request waits (each follower's part
// leaves 300 ms late; its ranks begin each step 150 ms after the leader's,
// so a step's first round runs nothing): the leader's rank holds its
// requests through the next round instead of sending them to the leader's
// negotiation, where the followers' never come (1,024 followers stalled
// that way). Every cached step runs after the rounds; no request goes by
// cache id.
TEST(SwarmTest, SlowRoundsKeepHeldRequestsInTheRounds) {
  constexpr int kTensors = 16, kSteps = 6;
  SwarmRun run;
  ASSERT_NO_FATAL_FAILURE(runSwarm(16, kTensors, kSteps, {"--part-delay-ms", "300", "--step-delay-ms", "150"}, &run));
  EXPECT_NE(run.ended.find(" 0 response-cache hits"), std::string::npos) << run.leader_log;
  EXPECT_NE(run.ended.find(" " + std::to_string((kSteps - 1) * kTensors) + " collectives run after them"),
            std::string::npos)
      << run.leader_log;
}

// Leader failover at scale: a real leader and a real candidate (the
// follower of cross rank 1) in an elastic job with the swarm's followers;
// the swarm kills the leader and every one of its followers votes for the
// candidate at once. The candidate holds the votes until it notices the
// loss itself, takes over with the majority, and answers them all; it holds
// no thread per vote.
TEST(SwarmTest, TheSwarmsFollowersElectANewLeaderWithoutAThreadPerVote) {
  const int voters = envOr("GRADSYNC_SWARM_VOTERS", 256);
  const std::vector<std::string> flags = {"--peer-address",    "127.0.0.1:0", "--join-timeout-seconds", "120",
                                          "--leader-failover", "quorum"};
  DaemonFixture leader, candidate;
  std::string error;
  ASSERT_TRUE(leader.start(flags, &error)) << error;
  ASSERT_TRUE(candidate.start(flags, &error)) << error;
  const std::string job = "swarm-elect";
  const int size = voters + 2;
  Process swarm = Process::spawn({runfile("tools/swarm/swarm"), "--leader", leader.peerAddress(), "--leader-pid",
                                  std::to_string(leader.process().pid()), "--job", job, "--token", "secret-token",
                                  "--followers", std::to_string(voters), "--candidate", candidate.peerAddress(),
                                  "--candidate-pid", std::to_string(candidate.process().pid()), "--timeout-s", "120"},
                                 {}, leader.dir() + "/swarm.log");
  const std::map<std::string, std::string> env = {{"GRADSYNC_LEADER", leader.peerAddress()},
                                                  {"GRADSYNC_LOCAL_RANK", "0"},
                                                  {"GRADSYNC_LOCAL_SIZE", "1"},
                                                  {"GRADSYNC_ELASTIC", "1"},
                                                  {"GRADSYNC_MIN_SIZE", "2"}};
  // Both wait in their first step, which the swarm never submits.
  Process rank0 = leader.spawnRank(job, 0, size, {"empty_steps", "20", "1"}, env);
  Process rank1 = candidate.spawnRank(job, 1, size, {"empty_steps", "20", "1"}, env);
  const int swarm_code = swarm.wait(std::chrono::seconds(200));
  rank1.kill(SIGKILL);
  rank0.kill(SIGKILL);
  rank1.wait(std::chrono::seconds(10));
  rank0.wait(std::chrono::seconds(10));
  ASSERT_EQ(swarm_code, 0) << swarm.log() << "\n--- candidate:\n" << candidate.log();
  std::smatch m;
  const std::string log = swarm.log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("ELECTION [^\n]*"))) << log;
  const std::string line = m[0].str();
  std::printf("%s\n", line.c_str());
  EXPECT_EQ(field(line, "won"), voters) << line;
  EXPECT_EQ(field(line, "new_epoch"), 2) << line;
  EXPECT_LT(field(line, "candidate_threads_most") - field(line, "candidate_threads_before"), 32) << line;
  EXPECT_GE(field(line, "other_call_ms"), 0) << line;  // the pool for other calls answered meanwhile
  EXPECT_NE(candidate.log().find("takes over as leader (a majority voted)"), std::string::npos) << candidate.log();
}

}  // namespace
}  // namespace gradsync::testutil
