// SPDX-License-Identifier: Apache-2.0
// One real leader (gradsyncd, its rank 0 running empty steps) and the swarm
// (tools/swarm) playing GRADSYNC_SWARM_FOLLOWERS follower daemons (256 by
// default), one rank each: the job forms, every step's requests are
// answered, the leader holds no thread per follower, and no coordination
// message passes 1 MiB. Prints the swarm's figures.
#include <cstdlib>
#include <regex>
#include <string>

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

TEST(SwarmTest, FollowersOfOneRankEachStepAgainstOneLeader) {
  const int followers = envOr("GRADSYNC_SWARM_FOLLOWERS", 256);
  const int tensors = envOr("GRADSYNC_SWARM_TENSORS", 161);
  const int steps = envOr("GRADSYNC_SWARM_STEPS", 6);
  DaemonFixture leader;
  std::string error;
  ASSERT_TRUE(leader.start({"--peer-address", "127.0.0.1:0", "--join-timeout-seconds", "120"}, &error)) << error;
  const std::string job = "swarm";
  Process swarm = Process::spawn({runfile("tools/swarm/swarm"), "--leader", leader.peerAddress(), "--leader-pid",
                                  std::to_string(leader.process().pid()), "--job", job, "--token", "secret-token",
                                  "--followers", std::to_string(followers), "--tensors", std::to_string(tensors),
                                  "--steps", std::to_string(steps), "--timeout-s", "240"},
                                 {}, leader.dir() + "/swarm.log");
  Process rank0 = leader.spawnRank(
      job, 0, followers + 1, {"empty_steps", std::to_string(steps), std::to_string(tensors)},
      {{"GRADSYNC_LEADER", leader.peerAddress()}, {"GRADSYNC_LOCAL_RANK", "0"}, {"GRADSYNC_LOCAL_SIZE", "1"}});
  const int swarm_code = swarm.wait(std::chrono::seconds(270));
  const int rank0_code = rank0.wait(std::chrono::seconds(30));
  ASSERT_EQ(swarm_code, 0) << swarm.log() << "\n--- rank 0:\n" << rank0.log() << "\n--- leader:\n" << leader.log();
  ASSERT_EQ(rank0_code, 0) << rank0.log() << "\n--- leader:\n" << leader.log();
  std::smatch m;
  const std::string log = swarm.log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("SWARM [^\n]*"))) << log;
  const std::string line = m[0].str();
  std::printf("%s\n", line.c_str());
  // No thread per follower at the leader, joining or joined.
  EXPECT_LT(field(line, "leader_threads"), 64) << line;
  EXPECT_LT(field(line, "leader_threads_joining"), 64) << line;
  EXPECT_LE(field(line, "largest_message"), 1 << 20) << line;
  // Cached steps went by rounds through the leader (the swarm has no data
  // plane): a small message per follower and round each way.
  std::string leader_log;
  ASSERT_TRUE(waitFor(
      [&] {
        leader_log = leader.log();
        return leader_log.find("job 'swarm' ended") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << leader_log;
  EXPECT_NE(leader_log.find("cached collectives run after rounds through the leader among the " +
                            std::to_string(followers + 1) + " daemons"),
            std::string::npos)
      << leader_log;
  EXPECT_LT(field(line, "follower_tx_bytes_per_step"), 1024) << line;
  ASSERT_TRUE(std::regex_search(leader_log, m, std::regex("job 'swarm' ended: [^\n]*"))) << leader_log;
  std::printf("%s\n", m[0].str().c_str());
}

}  // namespace
}  // namespace gradsync::testutil
