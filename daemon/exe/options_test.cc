// SPDX-License-Identifier: Apache-2.0
#include "daemon/exe/options.h"

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::exe {
namespace {

using ::testing::HasSubstr;

std::string writeFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(OptionsTest, DefaultsAreFilledIn) {
  auto options = parseOptions({});
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  const auto& c = options->config;
  EXPECT_EQ(c.socket_path(), "/run/gradsync/gradsyncd.sock");
  EXPECT_EQ(c.handoff_socket_path(), "/run/gradsync/gradsyncd.sock.handoff");
  EXPECT_EQ(c.socket_mode(), 0660u);
  EXPECT_EQ(c.fusion_threshold_bytes(), 64u << 20);
  EXPECT_EQ(c.stall_warning_seconds(), 60u);
  EXPECT_EQ(c.cycle_time_ms(), 1u);
  EXPECT_EQ(c.gpu_cross_node(), "auto");
  EXPECT_EQ(c.leader_failover(), "off");
  EXPECT_EQ(c.steady_state(), "rounds");
  EXPECT_EQ(c.link_cost(), "auto");
  EXPECT_EQ(c.data_plane_tcp_segment_bytes(), 512u << 10);
  EXPECT_FALSE(c.autotune());
  EXPECT_EQ(c.autotune_warmup_samples(), 3u);
  EXPECT_EQ(c.autotune_steps_per_sample(), 10u);
  EXPECT_EQ(c.autotune_samples_per_setting(), 5u);
}

TEST(OptionsTest, AutotuneFlags) {
  auto options = parseOptions({"--autotune", "true", "--autotune-steps-per-sample", "4"});
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_TRUE(options->config.autotune());
  EXPECT_EQ(options->config.autotune_steps_per_sample(), 4u);
  EXPECT_THAT(parseOptions({"--autotune", "maybe"}).status().message(), HasSubstr("not true or false"));
  EXPECT_THAT(parseOptions({"--autotune-samples-per-setting", "101"}).status().message(),
              HasSubstr("autotune_samples_per_setting = 101"));
}

TEST(OptionsTest, TopologyLabel) {
  auto options = parseOptions({"--topology", "zone-a/rack-12/switch-3"});
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->config.topology(), "zone-a/rack-12/switch-3");
  EXPECT_THAT(parseOptions({"--topology", "rack 1"}).status().message(), HasSubstr("topology 'rack 1' must be"));
  EXPECT_THAT(parseOptions({"--topology", std::string(257, 'a')}).status().message(), HasSubstr("at most 256"));
}

TEST(OptionsTest, TextFileThenFlagsOverride) {
  auto path = writeFile("a.textproto", "# comment\nsocket_path: \"/tmp/x.sock\"\nfusion_threshold_bytes: 1024\n");
  auto options = parseOptions({"--config-path", path, "--fusion-threshold-bytes=2048", "--socket-mode", "600"});
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->config.socket_path(), "/tmp/x.sock");
  EXPECT_EQ(options->config.fusion_threshold_bytes(), 2048u);
  EXPECT_EQ(options->config.socket_mode(), 0600u);
}

TEST(OptionsTest, JsonFile) {
  auto path = writeFile("a.json", "{\"socketPath\": \"/tmp/j.sock\", \"stallWarningSeconds\": 5}");
  auto options = parseOptions({"--config-path", path});
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->config.socket_path(), "/tmp/j.sock");
  EXPECT_EQ(options->config.stall_warning_seconds(), 5u);
}

TEST(OptionsTest, ErrorsNameFileLineAndField) {
  auto bad_text = writeFile("bad.textproto", "socket_path: \"/x\"\nno_such_field: 3\n");
  auto options = parseOptions({"--config-path", bad_text});
  ASSERT_FALSE(options.isOk());
  EXPECT_THAT(options.status().message(), HasSubstr("bad.textproto (text format): line 2"));
  EXPECT_THAT(options.status().message(), HasSubstr("no_such_field"));

  auto bad_json = writeFile("bad.json", "{\"socketPath\": 3}");
  EXPECT_THAT(parseOptions({"--config-path", bad_json}).status().message(), HasSubstr("bad.json (JSON)"));
  EXPECT_THAT(parseOptions({"--config-path", "/nonexistent/x"}).status().message(), HasSubstr("cannot read"));
}

TEST(OptionsTest, ValidationErrors) {
  EXPECT_THAT(parseOptions({"--socket-mode", "666"}).status().message(), HasSubstr("grants access to others"));
  EXPECT_THAT(parseOptions({"--cycle-time-ms", "5000"}).status().message(), HasSubstr("cycle_time_ms = 5000"));
  EXPECT_THAT(parseOptions({"--stall-warning-seconds", "10", "--stall-deadline-seconds", "5"}).status().message(),
              HasSubstr("stall_deadline_seconds (5)"));
  EXPECT_THAT(parseOptions({"--log-level", "loud"}).status().message(), HasSubstr("log_level 'loud'"));
  EXPECT_THAT(parseOptions({"--gpu-cross-node", "pigeon"}).status().message(),
              HasSubstr("gpu_cross_node 'pigeon' is not one of auto, staging"));
  EXPECT_THAT(parseOptions({"--leader-failover", "vote"}).status().message(),
              HasSubstr("leader_failover 'vote' is not one of off, quorum"));
  EXPECT_THAT(parseOptions({"--steady-state", "fast"}).status().message(),
              HasSubstr("steady_state 'fast' is not one of rounds, leader-rounds, leader"));
  EXPECT_THAT(parseOptions({"--data-plane-tcp-segment-bytes", "4096"}).status().message(),
              HasSubstr("data_plane_tcp_segment_bytes = 4096 is outside [8192, 16777216]"));
  auto staging = parseOptions({"--gpu-cross-node", "staging"});
  ASSERT_TRUE(staging.isOk());
  EXPECT_EQ(staging->config.gpu_cross_node(), "staging");
  EXPECT_THAT(parseOptions({"--reduce-threads", "-1"}).status().message(), HasSubstr("not a non-negative integer"));
  EXPECT_THAT(parseOptions({"--bogus", "1"}).status().message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(parseOptions({"--socket-path"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(parseOptions({"--socket-path", std::string(200, 'x')}).status().message(), HasSubstr("108"));
}

}  // namespace
}  // namespace gradsync::exe
