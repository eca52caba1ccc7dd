// SPDX-License-Identifier: Apache-2.0
// The daemon's metrics as Prometheus sees them: rendered from the Admin
// service's answers, served over HTTP, fetched by a real HTTP client and
// checked by Prometheus' promtool where the machine has it.
#include "daemon/metrics/prometheus.h"

#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "daemon/metrics/http_exporter.h"
#include "daemon/metrics/job_stats.h"
#include "gtest/gtest.h"

namespace gradsync::metrics {
namespace {

constexpr const char* kPromtool = "/usr/bin/promtool";

// A daemon with one job across two nodes that did some work.
void sampleDaemon(v1::GetStatusResponse* status, v1::ListJobsResponse* jobs) {
  status->set_version("0.1.0");
  status->set_uptime_seconds(12.5);
  status->set_jobs(1);
  v1::JobInfo* job = jobs->add_jobs();
  job->set_job_id("train \"a\"");
  job->set_size(4);
  job->set_local_size(2);
  for (int r = 0; r < 2; ++r) {
    v1::RankInfo* rank = job->add_ranks();
    rank->set_rank(r);
    rank->set_connected(true);
    rank->set_arena_bytes(1 << 20);
  }
  JobStats stats;
  const auto t0 = JobStats::Clock::now();
  stats.done(v1::ALLREDUCE, v1::FLOAT32, 4096, t0, t0, t0 + std::chrono::microseconds(80));
  stats.done(v1::PROCESS_SET_ADD, v1::DATA_TYPE_UNSPECIFIED, 0, t0, t0, t0 + std::chrono::microseconds(80));
  stats.phase("REDUCE", true, t0);
  stats.phase("REDUCE", false, t0 + std::chrono::microseconds(50));
  stats.failed(StatusCode::kAborted);
  stats.fused(4096);
  stats.fill(job);
  job->set_epoch(1);
  for (int n = 0; n < 2; ++n) {
    v1::NodeStatus* node = job->add_nodes();
    node->set_cross_rank(n);
    node->set_self(n == 0);
    node->set_peer_address("node" + std::to_string(n) + ":7000");
    node->set_bytes_sent(1000);
    node->set_throughput_gbps(2.5);
    node->set_heartbeat_age_ms(n == 0 ? 0 : 120);
  }
  v1::JobInfo* ended = jobs->add_jobs();
  ended->set_job_id("old");
  ended->set_ended(true);
}

std::string rendered() {
  v1::GetStatusResponse status;
  v1::ListJobsResponse jobs;
  sampleDaemon(&status, &jobs);
  return renderPrometheus(status, jobs);
}

TEST(Prometheus, NamesLabelsAndValues) {
  const std::string text = rendered();
  EXPECT_NE(text.find("gradsync_build_info{version=\"0.1.0\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gradsync_job_connected_ranks{job_id=\"train \\\"a\\\"\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gradsync_job_arena_bytes{job_id=\"train \\\"a\\\"\"} 2097152\n"), std::string::npos) << text;
  EXPECT_NE(
      text.find("gradsync_operations_total{job_id=\"train \\\"a\\\"\",collective=\"allreduce\",dtype=\"float32\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("collective=\"process_set_add\""), std::string::npos) << text;
  EXPECT_NE(text.find("gradsync_operation_latency_seconds_bucket{job_id=\"train \\\"a\\\"\",collective=\"allreduce\","
                      "le=\"0.0001\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gradsync_operation_errors_total{job_id=\"train \\\"a\\\"\",cause=\"ABORTED\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gradsync_phase_seconds_total{job_id=\"train \\\"a\\\"\",phase=\"REDUCE\"} 5e-05\n"),
            std::string::npos)
      << text;
  // Other daemons only, throughput in bytes per second, heartbeat in seconds.
  EXPECT_EQ(text.find("node0:7000"), std::string::npos) << text;
  EXPECT_NE(text.find("gradsync_peer_throughput_bytes_per_second{job_id=\"train \\\"a\\\"\",node=\"1\",peer=\"node1:"
                      "7000\"} 2500000000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gradsync_peer_heartbeat_age_seconds{job_id=\"train \\\"a\\\"\",node=\"1\",peer=\"node1:7000\"} "
                      "0.12\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("job_id=\"old"), std::string::npos) << "an ended job's series stay out";
}

TEST(Prometheus, PromtoolAcceptsTheFormat) {
  if (::access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " is not installed (Debian's prometheus package)";
  const std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/metrics-" +
                           std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << rendered();
  // promtool prints lint findings and exits 1 on a format error or a finding.
  const std::string command = std::string(kPromtool) + " check metrics < " + path + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << output;
}

TEST(Prometheus, ServedOverHttpToARealClient) {
  const std::string text = rendered();
  auto exporter = HttpExporter::start("127.0.0.1:0", [&] { return text; });
  ASSERT_TRUE(exporter.isOk()) << exporter.status().toString();
  const std::string address = (*exporter)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(response->body, text);
  auto missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(Prometheus, BadAddressesAreErrors) {
  EXPECT_FALSE(HttpExporter::start("nocolon", [] { return ""; }).isOk());
  EXPECT_FALSE(HttpExporter::start("127.0.0.1:99999", [] { return ""; }).isOk());
  EXPECT_FALSE(HttpExporter::start("127.0.0.1:http", [] { return ""; }).isOk());
  auto first = HttpExporter::start(":0", [] { return ""; });
  ASSERT_TRUE(first.isOk());
  EXPECT_EQ((*first)->address().rfind("127.0.0.1:", 0), 0u) << "an empty host is loopback";
  EXPECT_FALSE(HttpExporter::start((*first)->address(), [] { return ""; }).isOk()) << "port in use";
}

}  // namespace
}  // namespace gradsync::metrics
