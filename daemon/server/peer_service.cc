// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/peer_service.h"

#include "daemon/server/control_service.h"

namespace gradsync::server {

grpc::Status PeerService::JoinJob(grpc::ServerContext*, const v1::JoinJobRequest* request,
                                  v1::JoinJobResponse* response) {
  auto job = registry_->findJob(request->job_id());
  // NOT_FOUND: the leader's own ranks may not have registered yet; the
  // follower retries until its join deadline.
  if (!job || !job->crossNode()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no multi-node job '" + request->job_id() + "' here (yet)");
  }
  auto membership = job->crossNode()->acceptJoin(*request);
  if (!membership.isOk()) return toGrpc(membership.status());
  *response = std::move(membership).value();
  return grpc::Status::OK;
}

grpc::Status PeerService::AbortJob(grpc::ServerContext*, const v1::AbortJobRequest* request, v1::AbortJobResponse*) {
  auto job = registry_->findJob(request->job_id());
  if (!job || !job->crossNode()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no multi-node job '" + request->job_id() + "' here");
  }
  return toGrpc(job->crossNode()->acceptAbort(*request));
}

grpc::Status PeerService::CheckMember(grpc::ServerContext*, const v1::CheckMemberRequest* request,
                                      v1::CheckMemberResponse* response) {
  auto job = registry_->findJob(request->job_id());
  if (!job || !job->crossNode() || !job->crossNode()->isLeader()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "this daemon does not lead job '" + request->job_id() + "'");
  }
  auto answer = job->crossNode()->checkMember(*request);
  if (!answer.isOk()) return toGrpc(answer.status());
  *response = std::move(answer).value();
  return grpc::Status::OK;
}

grpc::Status PeerService::Elect(grpc::ServerContext* context, const v1::ElectRequest* request,
                                v1::ElectResponse* response) {
  auto job = registry_->findJob(request->job_id());
  if (!job || !job->crossNode()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no multi-node job '" + request->job_id() + "' here");
  }
  auto answer = job->crossNode()->acceptVote(*request, [context] { return !context->IsCancelled(); });
  if (!answer.isOk()) return toGrpc(answer.status());
  *response = std::move(answer).value();
  return grpc::Status::OK;
}

grpc::Status PeerService::Coordinate(grpc::ServerContext* context, peer::LeaderStream* stream) {
  v1::FollowerMessage hello;
  if (!stream->Read(&hello) || !hello.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be hello");
  }
  auto job = registry_->findJob(hello.hello().job_id());
  if (!job || !job->crossNode() || !job->crossNode()->isLeader()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "this daemon does not lead job '" + hello.hello().job_id() + "'");
  }
  grpc::Status status = job->crossNode()->serveFollower(context, stream, hello);
  registry_->retire(std::move(job));  // the stream ends as this returns; the job's teardown may wait for that
  return status;
}

}  // namespace gradsync::server
