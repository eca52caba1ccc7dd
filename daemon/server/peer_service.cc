// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/peer_service.h"

#include "daemon/peer/coordinate_reactor.h"
#include "daemon/server/control_service.h"

namespace gradsync::server {

grpc::ServerUnaryReactor* PeerService::JoinJob(grpc::CallbackServerContext* context, const v1::JoinJobRequest* request,
                                               v1::JoinJobResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto job = registry_->findJob(request->job_id());
  // NOT_FOUND: the leader's own ranks may not have registered yet; the
  // follower retries until its join deadline.
  if (!job || !job->crossNode()) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "no multi-node job '" + request->job_id() + "' here (yet)"));
    return reactor;
  }
  // The job answers every pending join before it goes (its CrossNode's end).
  job->crossNode()->acceptJoin(*request, [reactor, response](StatusOr<v1::JoinJobResponse> membership) {
    if (membership.isOk()) *response = std::move(membership).value();
    reactor->Finish(toGrpc(membership.status()));
  });
  return reactor;
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

namespace {

// One vote on its way: held by the job's election until answered; the
// voter's call ending first withdraws it. Holds the job until done.
class VoteReactor final : public grpc::ServerUnaryReactor {
 public:
  VoteReactor(JobRegistry* registry, std::shared_ptr<Job> job, v1::ElectResponse* response)
      : registry_(registry), job_(std::move(job)), response_(response) {}

  void start(const v1::ElectRequest& request) {
    vote_ = job_->crossNode()->acceptVote(request, [this](StatusOr<v1::ElectResponse> answer) {
      if (answer.isOk()) *response_ = std::move(answer).value();
      Finish(toGrpc(answer.status()));
    });
  }
  // gRPC calls these only once the handler returned: vote_ is set.
  void OnCancel() override { job_->crossNode()->voterGone(vote_); }
  void OnDone() override {
    registry_->retire(std::move(job_));
    delete this;
  }

 private:
  JobRegistry* const registry_;
  std::shared_ptr<Job> job_;
  v1::ElectResponse* const response_;
  uint64_t vote_ = 0;
};

}  // namespace

grpc::ServerUnaryReactor* PeerService::Elect(grpc::CallbackServerContext* context, const v1::ElectRequest* request,
                                             v1::ElectResponse* response) {
  auto job = registry_->findJob(request->job_id());
  if (!job || !job->crossNode()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no multi-node job '" + request->job_id() + "' here"));
    return reactor;
  }
  auto* reactor = new VoteReactor(registry_, std::move(job), response);
  reactor->start(*request);
  return reactor;
}

grpc::Status PeerService::Members(grpc::ServerContext*, const v1::MembersRequest* request,
                                  v1::MembersResponse* response) {
  auto job = registry_->findJob(request->job_id());
  if (!job || !job->crossNode()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no multi-node job '" + request->job_id() + "' here");
  }
  auto answer = job->crossNode()->membersPart(*request);
  if (!answer.isOk()) return toGrpc(answer.status());
  *response = std::move(answer).value();
  return grpc::Status::OK;
}

namespace {

// A follower's session, holding its job until the stream ends; the job is
// then retired (its teardown may wait for the stream's end).
class JobSession : public peer::FollowerSession {
 public:
  JobSession(JobRegistry* registry, std::shared_ptr<Job> job, std::unique_ptr<peer::FollowerSession> served)
      : registry_(registry), job_(std::move(job)), served_(std::move(served)) {}
  ~JobSession() override {
    served_.reset();
    registry_->retire(std::move(job_));
  }
  grpc::Status onMessage(const v1::FollowerMessage& message) override { return served_->onMessage(message); }
  void onEnd(bool cut_off, const std::string& why) override { served_->onEnd(cut_off, why); }

 private:
  JobRegistry* const registry_;
  std::shared_ptr<Job> job_;
  std::unique_ptr<peer::FollowerSession> served_;
};

}  // namespace

grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage>* PeerService::Coordinate(
    grpc::CallbackServerContext* context) {
  auto resolve = [registry = registry_](const v1::FollowerMessage& hello, std::shared_ptr<peer::FollowerStream> stream,
                                        std::unique_ptr<peer::FollowerSession>* session) {
    auto job = registry->findJob(hello.hello().job_id());
    if (!job || !job->crossNode() || !job->crossNode()->isLeader()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "this daemon does not lead job '" + hello.hello().job_id() + "'");
    }
    std::unique_ptr<peer::FollowerSession> served;
    grpc::Status status = job->crossNode()->serveFollower(hello, std::move(stream), &served);
    if (!status.ok()) {
      registry->retire(std::move(job));
      return status;
    }
    *session = std::make_unique<JobSession>(registry, std::move(job), std::move(served));
    return grpc::Status::OK;
  };
  return new peer::CoordinateReactor(context, std::move(resolve), follower_limits_);
}

}  // namespace gradsync::server
