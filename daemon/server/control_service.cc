// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/control_service.h"

#include "daemon/common/logging.h"
#include "daemon/server/ring_reader.h"

namespace gradsync::server {

grpc::Status toGrpc(const Status& status) {
  if (status.isOk()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

grpc::Status ControlService::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
  auto session = registry_->registerRank(*request);
  if (!session.isOk()) {
    GS_LOG(control, warn, "registration of rank {} of job '{}' refused: {}", request->rank(), request->job_id(),
           session.status().toString());
    return toGrpc(session.status());
  }
  response->set_session_id((*session)->id());
  // The secret never leaves the Session object except here, once.
  std::string secret(handoff::kSessionSecretBytes, '\0');
  (*session)->copySecret(reinterpret_cast<uint8_t*>(secret.data()));
  response->set_session_secret(secret);
  response->set_daemon_version(info_.daemon_version);
  response->set_max_arena_bytes(info_.max_arena_bytes);
  response->set_max_name_length(info_.max_name_length);
  response->set_handoff_socket_path(info_.handoff_socket_path);
  for (const auto& uuid : info_.gpu_uuids) response->add_gpu_uuids(uuid);
  return grpc::Status::OK;
}

grpc::Status ControlService::Session(grpc::ServerContext* context, SessionStream* stream) {
  v1::ClientMessage first;
  if (!stream->Read(&first)) return grpc::Status(grpc::StatusCode::CANCELLED, "stream closed before hello");
  if (first.msg_case() != v1::ClientMessage::kHello) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first session message must be hello");
  }
  auto session = registry_->findSession(first.hello().session_id());
  const std::string& secret = first.hello().session_secret();
  if (!session || !session->secretMatches(reinterpret_cast<const uint8_t*>(secret.data()), secret.size())) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unknown session or wrong session secret");
  }
  if (session->arena() == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "hand over the arena before opening the session");
  }
  auto job = registry_->jobOf(*session);
  if (!job) return grpc::Status(grpc::StatusCode::NOT_FOUND, "session ended");
  if (!session->attachStream(stream, context)) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "the session already has a stream");
  }
  v1::DaemonMessage ack;
  ack.mutable_hello_ack()->set_session_id(session->id());
  session->send(ack);
  // The arena's submission ring feeds the job beside the stream; a client
  // that corrupts it loses its session.
  auto ring_reader = std::make_unique<RingReader>(
      session, [&](const v1::Enqueue& enqueue) { job->submit(session, enqueue); },
      [&](const std::string& why) {
        GS_LOG(control, warn, "job '{}': {}: {}; closing its session", session->identity().job_id, session->describe(),
               why);
        context->TryCancel();
      });

  grpc::Status result = grpc::Status::OK;
  v1::ClientMessage message;
  while (stream->Read(&message)) {
    if (message.msg_case() == v1::ClientMessage::kEnqueue) {
      job->submit(session, message.enqueue());
    } else if (message.msg_case() == v1::ClientMessage::kOutputGrant) {
      job->grant(*session, message.output_grant());
    } else {
      result = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unexpected session message");
      break;
    }
  }
  ring_reader.reset();  // joins its thread: no submissions after this
  session->detachStream();
  const bool crashed = context->IsCancelled();
  registry_->sessionLost(session->id(),
                         crashed ? "disconnected (session stream broken: the process exited or was killed)"
                                 : "left the job (session closed)",
                         crashed);
  return result;
}

}  // namespace gradsync::server
