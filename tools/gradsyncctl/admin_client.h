// SPDX-License-Identifier: Apache-2.0
// gradsyncctl's side of the Admin service: one channel to the daemon's Unix
// socket and one method per RPC.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "proto/gradsync/v1/admin.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace gradsync::ctl {

struct AdminClientOptions {
  // Path of the daemon's socket (not a gRPC target: "unix:" is added).
  std::string socket_path = "/run/gradsync/gradsyncd.sock";
  // Budget of one command: connecting plus the RPC, in seconds.
  double timeout_seconds = 5.0;
};

// Not thread-safe; meant for one command of a short-lived CLI process.
//
// Every method returns within the timeout, counted from the first call that
// connects. Errors:
//   UNAVAILABLE        the daemon cannot be reached (no socket, connection
//                      refused, permission denied); the message says which
//                      and starts with "cannot reach gradsyncd at unix:...".
//   DEADLINE_EXCEEDED  connected (or connecting) but no answer in time.
//   anything else      the daemon's own answer, code mapped one to one.
class AdminClient {
 public:
  explicit AdminClient(AdminClientOptions options);

  // "unix:<socket_path>".
  const std::string& target() const { return target_; }

  StatusOr<v1::GetStatusResponse> getStatus();
  // All jobs, or only `job_id` when it is not empty.
  // `include_ended`: also the elastic jobs that ended lately (their history).
  StatusOr<v1::ListJobsResponse> listJobs(const std::string& job_id, bool include_ended = false);
  StatusOr<v1::ControlTimelineResponse> controlTimeline(const v1::ControlTimelineRequest& request);
  StatusOr<v1::SetDrainingResponse> setDraining(bool draining);
  // All jobs, or only `job_id` when it is not empty.
  StatusOr<v1::ListTensorsResponse> listTensors(const std::string& job_id);
  // grpc.health.v1 on the same socket: "" is the server as a whole.
  StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health(const std::string& service);
  // The next call gets a whole timeout again (a command that repeats, top).
  void renewDeadline();

 private:
  // Checks the socket file, then opens the channel and waits until it is
  // connected or the deadline passes. Idempotent.
  Status connect();
  // Context with the command's deadline.
  void prepare(grpc::ClientContext* context) const;
  Status fromGrpc(const grpc::Status& status, const char* rpc) const;
  // One unary Admin call within the command's deadline.
  template <typename Request, typename Response>
  StatusOr<Response> call(grpc::Status (v1::Admin::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                          const Request& request, const char* name) {
    RETURN_IF_ERROR(connect());
    grpc::ClientContext context;
    prepare(&context);
    Response response;
    RETURN_IF_ERROR(fromGrpc((stub_.get()->*method)(&context, request, &response), name));
    return response;
  }

  AdminClientOptions options_;
  std::string target_;
  std::chrono::system_clock::time_point deadline_;
  bool deadline_set_ = false;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

// Why a Unix stream socket at `path` cannot be connected to, as a short
// phrase ("no such socket; is the daemon running?"), or "" when a connection
// succeeds (or would, once the daemon accepts it).
std::string probeUnixSocket(const std::string& path);

}  // namespace gradsync::ctl
