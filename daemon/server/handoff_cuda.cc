// SPDX-License-Identifier: Apache-2.0
// The hand-off socket's frames after the hello: a rank attaches its GPU and
// exports (or forgets) the allocations its CUDA tensors live in, or starts
// and stops its job's timeline in a file it opened. Each request gets
// exactly one response; a malformed one gets an error and the session goes
// on.
#include "daemon/common/logging.h"
#include "daemon/server/handoff_server.h"
#include "handoff/fd_passing.h"
#include "handoff/frame.h"
#include "handoff/shm_layout.h"

namespace gradsync::server {
namespace {

void setStatus(const Status& status, v1::HandoffResponse* response) {
  response->set_code(static_cast<int32_t>(status.code()));
  response->set_message(status.message());
}

}  // namespace

bool HandoffServer::handleFrame(Connection& connection) {
  std::string bytes;
  std::vector<UniqueFd> attached;
  const Status received =
      handoff::recvMessage(connection.fd.get(), &bytes, sizeof(handoff::FrameHeader) + handoff::kMaxFramePayload,
                           std::chrono::milliseconds(0), &attached);
  if (bytes.empty()) return false;  // end of the connection, or an error on it
  v1::HandoffResponse response;
  auto session = registry_->findSession(connection.session_id);
  if (!session) return false;
  v1::HandoffRequest request;
  Status parsed = received.isOk() ? handoff::decodeFrame(bytes, &request) : received;
  if (!parsed.isOk()) {
    setStatus(Status(parsed.code(), session->describe() + ": " + parsed.message()), &response);
  } else {
    response = handleRequest(*session, request, std::move(attached));
  }
  if (response.code() != 0) GS_LOG(handoff, warn, "job '{}': {}", session->identity().job_id, response.message());
  const std::string frame = handoff::encodeFrame(response);
  return handoff::sendWithFd(connection.fd.get(), frame.data(), frame.size(), -1).isOk();
}

v1::HandoffResponse HandoffServer::handleRequest(Session& session, const v1::HandoffRequest& request,
                                                 std::vector<UniqueFd> fds) {
  v1::HandoffResponse response;
  const std::string who = session.describe();
  if (request.msg_case() == v1::HandoffRequest::kTimelineStart ||
      request.msg_case() == v1::HandoffRequest::kTimelineStop) {
    setStatus(controlTimeline(session, request, fds.empty() ? UniqueFd() : std::move(fds[0])), &response);
    return response;
  }
  if (gpus_ == nullptr) {
    setStatus(failedPrecondition(who + " sent a CUDA tensor, but " + no_gpu_reason_), &response);
    return response;
  }
  switch (request.msg_case()) {
    case v1::HandoffRequest::kCudaAttach:
      setStatus(attachGpu(session, request.cuda_attach(), &response), &response);
      return response;
    case v1::HandoffRequest::kBufferExport:
    case v1::HandoffRequest::kBufferRelease: {
      auto gpu = session.gpu();
      if (!gpu) {
        setStatus(failedPrecondition(who + " exported CUDA memory before attaching its GPU"), &response);
      } else if (request.msg_case() == v1::HandoffRequest::kBufferExport) {
        setStatus(gpu->addBuffer(request.buffer_export(), std::move(fds)), &response);
      } else {
        setStatus(gpu->removeBuffer(request.buffer_release().buffer_id()), &response);
      }
      return response;
    }
    default:
      setStatus(invalidArgument(who + ": empty or unknown hand-off request"), &response);
      return response;
  }
}

Status HandoffServer::controlTimeline(Session& session, const v1::HandoffRequest& request, UniqueFd fd) {
  auto job = registry_->jobOf(session);
  if (!job) return failedPrecondition(session.describe() + ": its job is gone");
  if (session.rank() != 0) return okStatus();  // as in Horovod, rank 0's timeline is the job's
  if (request.msg_case() == v1::HandoffRequest::kTimelineStop) {
    job->stopTimeline();
    return okStatus();
  }
  Status started = job->startTimeline(std::move(fd), request.timeline_start().mark_cycles());
  if (!started.isOk()) return Status(started.code(), session.describe() + ": " + started.message());
  GS_LOG(handoff, info, "job '{}': {} started the timeline", session.identity().job_id, session.describe());
  return okStatus();
}

Status HandoffServer::attachGpu(Session& session, const v1::CudaAttach& request, v1::HandoffResponse* response) {
  const std::string who = session.describe();
  auto device = gpus_->placeRank(request.device_uuid(), session.rank());
  if (!device.isOk()) return Status(device.status().code(), who + ": " + device.status().message());
  ASSIGN_OR_RETURN(std::shared_ptr<gpu::ClientGpu> client,
                   gpu::ClientGpu::attach(&gpus_->backend(), *device, request.device_uuid(), request, who,
                                          {limits_.max_ipc_mappings_per_rank, limits_.ipc_budget}));
  for (const auto& handle : client->doneEventHandles()) response->add_done_events(handle);
  const int slots = client->eventSlots();
  RETURN_IF_ERROR(session.attachGpu(std::move(client)));
  GS_LOG(handoff, info, "job '{}': {} attached GPU {} (device {}, {} event pairs)", session.identity().job_id, who,
         request.device_uuid(), *device, slots);
  return okStatus();
}

}  // namespace gradsync::server
