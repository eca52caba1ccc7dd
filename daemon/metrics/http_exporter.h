// SPDX-License-Identifier: Apache-2.0
// The metrics endpoint: an HTTP server (cpp-httplib) answering GET /metrics
// with what `render` returns, in Prometheus' text format. Two threads serve
// it; a scrape never blocks collectives (render reads snapshots).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"

namespace httplib {
class Server;
}

namespace gradsync::metrics {

class HttpExporter {
 public:
  // Binds `address` ("host:port"; an empty host is 127.0.0.1, port 0 picks
  // a free one) and serves until the exporter is destroyed.
  static StatusOr<std::unique_ptr<HttpExporter>> start(const std::string& address, std::function<std::string()> render);
  ~HttpExporter();
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  // "host:port" as bound.
  const std::string& address() const { return address_; }

 private:
  HttpExporter() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

}  // namespace gradsync::metrics
