// SPDX-License-Identifier: Apache-2.0
#include "tools/gradsyncctl/admin_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/unique_fd.h"

namespace gradsync::ctl {
namespace {

std::string secondsText(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%gs", seconds);
  return buffer;
}

}  // namespace

std::string probeUnixSocket(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return "no such socket; is the daemon running?";
    if (errno == EACCES) return "permission denied on a directory of the path; is this user in group gradsync?";
    return std::string("cannot stat the socket: ") + std::strerror(errno);
  }
  if (!S_ISSOCK(st.st_mode)) return "the path exists but is not a socket";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return "socket path longer than " + std::to_string(sizeof(address.sun_path) - 1) + " bytes";
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  // Non-blocking, so a daemon whose accept backlog is full (hung) does not
  // block here: EAGAIN reads as reachable, and the RPC deadline decides.
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return std::string("cannot create a Unix socket: ") + std::strerror(errno);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return "";
  switch (errno) {
    case EAGAIN:
    case EINPROGRESS:
      return "";
    case ECONNREFUSED:
      return "connection refused; stale socket, is the daemon running?";
    case EACCES:
    case EPERM:
      return "permission denied; is this user in group gradsync?";
    default:
      return std::string("connect failed: ") + std::strerror(errno);
  }
}

AdminClient::AdminClient(AdminClientOptions options)
    : options_(std::move(options)), target_("unix:" + options_.socket_path) {}

Status AdminClient::connect() {
  if (!deadline_set_) {
    // A command's budget starts with its first call (renewDeadline: again).
    deadline_ = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                       std::chrono::duration<double>(options_.timeout_seconds));
    deadline_set_ = true;
  }
  if (stub_) return okStatus();
  std::string problem = probeUnixSocket(options_.socket_path);
  if (!problem.empty()) return unavailable("cannot reach gradsyncd at " + target_ + " (" + problem + ")");

  grpc::ChannelArguments args;
  // Fail fast on a broken socket rather than retrying until the deadline.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  channel_ = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args);
  if (!channel_->WaitForConnected(deadline_)) {
    channel_.reset();
    return deadlineExceeded("cannot reach gradsyncd at " + target_ + " (not connected within " +
                            secondsText(options_.timeout_seconds) + "; is the daemon hung?)");
  }
  stub_ = v1::Admin::NewStub(channel_);
  return okStatus();
}

void AdminClient::prepare(grpc::ClientContext* context) const { context->set_deadline(deadline_); }

Status AdminClient::fromGrpc(const grpc::Status& status, const char* rpc) const {
  if (status.ok()) return okStatus();
  auto code = static_cast<StatusCode>(status.error_code());
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status(code, "gradsyncd at " + target_ + " did not answer " + rpc + " within " +
                              secondsText(options_.timeout_seconds) + "; is the daemon hung?");
    case grpc::StatusCode::UNAVAILABLE:
      return Status(code, "cannot reach gradsyncd at " + target_ + " (" + rpc + ": " + status.error_message() + ")");
    default:
      return Status(code, std::string(rpc) + " failed: " + status.error_message());
  }
}

StatusOr<v1::GetStatusResponse> AdminClient::getStatus() {
  return call(&v1::Admin::Stub::GetStatus, v1::GetStatusRequest(), "GetStatus");
}

StatusOr<v1::ListJobsResponse> AdminClient::listJobs(const std::string& job_id, bool include_ended) {
  v1::ListJobsRequest request;
  request.set_job_id(job_id);
  request.set_include_ended(include_ended);
  return call(&v1::Admin::Stub::ListJobs, request, "ListJobs");
}

StatusOr<v1::ControlTimelineResponse> AdminClient::controlTimeline(const v1::ControlTimelineRequest& request) {
  return call(&v1::Admin::Stub::ControlTimeline, request, "ControlTimeline");
}

StatusOr<v1::SetDrainingResponse> AdminClient::setDraining(bool draining) {
  v1::SetDrainingRequest request;
  request.set_draining(draining);
  return call(&v1::Admin::Stub::SetDraining, request, "SetDraining");
}

StatusOr<v1::ListTensorsResponse> AdminClient::listTensors(const std::string& job_id) {
  v1::ListTensorsRequest request;
  request.set_job_id(job_id);
  return call(&v1::Admin::Stub::ListTensors, request, "ListTensors");
}

StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> AdminClient::health(const std::string& service) {
  RETURN_IF_ERROR(connect());
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  prepare(&context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  RETURN_IF_ERROR(fromGrpc(stub->Check(&context, request, &response), "Health.Check"));
  return response.status();
}

void AdminClient::renewDeadline() { deadline_set_ = false; }

}  // namespace gradsync::ctl
