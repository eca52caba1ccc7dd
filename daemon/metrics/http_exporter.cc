// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/http_exporter.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>

namespace gradsync::metrics {
namespace {
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr size_t kServingThreads = 2;
}  // namespace

StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::start(const std::string& address,
                                                            std::function<std::string()> render) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return invalidArgument("metrics_address '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) return invalidArgument("metrics_address '" + address + "' has no valid port");

  std::unique_ptr<HttpExporter> exporter(new HttpExporter());
  exporter->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *exporter->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(kServingThreads); };
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // daemon share the port and split the scrapes: SO_REUSEADDR alone.
  server.set_socket_options([](int fd) {
    int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  });
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_payload_max_length(4096);  // GET only: nothing to read
  server.Get("/metrics", [render](const httplib::Request&, httplib::Response& response) {
    response.set_content(render(), kContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("gradsyncd: metrics at /metrics\n", "text/plain");
  });
  const bool bound = port == 0 ? (port = server.bind_to_any_port(host)) > 0 : server.bind_to_port(host, port);
  if (!bound) return unavailable("cannot serve metrics on " + host + ":" + address.substr(colon + 1));
  exporter->address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  exporter->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return exporter;
}

HttpExporter::~HttpExporter() {
  // stop() does nothing before the listening loop runs: give the thread up
  // to 2 s to get there (it starts at once unless the machine is stalled).
  for (int i = 0; thread_.joinable() && !server_->is_running() && i < 2000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gradsync::metrics
