// SPDX-License-Identifier: Apache-2.0
// gRPC Peer service (daemon to daemon, TCP), handed to the job's CrossNode.
// JoinJob, Coordinate and Elect run on gRPC's callback API (Coordinate:
// peer/coordinate_reactor.h): no thread per follower, joining or joined,
// and none per vote in an election; AbortJob, CheckMember and Members
// answer at once on the sync pool.
#pragma once

#include "daemon/peer/outbox.h"
#include "daemon/server/job_registry.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::server {

class PeerService final
    : public v1::Peer::WithCallbackMethod_JoinJob<
          v1::Peer::WithCallbackMethod_Coordinate<v1::Peer::WithCallbackMethod_Elect<v1::Peer::Service>>> {
 public:
  explicit PeerService(JobRegistry* registry, peer::Outbox::Limits follower_limits = {})
      : registry_(registry), follower_limits_(follower_limits) {}

  // Answered once every node joined; no thread waits meanwhile.
  grpc::ServerUnaryReactor* JoinJob(grpc::CallbackServerContext* context, const v1::JoinJobRequest* request,
                                    v1::JoinJobResponse* response) override;
  grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage>* Coordinate(
      grpc::CallbackServerContext* context) override;
  grpc::Status AbortJob(grpc::ServerContext* context, const v1::AbortJobRequest* request,
                        v1::AbortJobResponse* response) override;
  grpc::Status CheckMember(grpc::ServerContext* context, const v1::CheckMemberRequest* request,
                           v1::CheckMemberResponse* response) override;
  // Answered once the election decides, the vote's time is up, or the
  // job stops; a voter that gives up withdraws its vote.
  grpc::ServerUnaryReactor* Elect(grpc::CallbackServerContext* context, const v1::ElectRequest* request,
                                  v1::ElectResponse* response) override;
  grpc::Status Members(grpc::ServerContext* context, const v1::MembersRequest* request,
                       v1::MembersResponse* response) override;

 private:
  JobRegistry* registry_;
  const peer::Outbox::Limits follower_limits_;  // what a follower may let wait
};

}  // namespace gradsync::server
