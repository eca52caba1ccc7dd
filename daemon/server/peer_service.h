// SPDX-License-Identifier: Apache-2.0
// gRPC Peer service (daemon to daemon, TCP): JoinJob and Coordinate, handed
// to the job's CrossNode.
#pragma once

#include "daemon/server/job_registry.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::server {

class PeerService final : public v1::Peer::Service {
 public:
  explicit PeerService(JobRegistry* registry) : registry_(registry) {}

  grpc::Status JoinJob(grpc::ServerContext* context, const v1::JoinJobRequest* request,
                       v1::JoinJobResponse* response) override;
  grpc::Status Coordinate(grpc::ServerContext* context, peer::LeaderStream* stream) override;
  grpc::Status AbortJob(grpc::ServerContext* context, const v1::AbortJobRequest* request,
                        v1::AbortJobResponse* response) override;
  grpc::Status CheckMember(grpc::ServerContext* context, const v1::CheckMemberRequest* request,
                           v1::CheckMemberResponse* response) override;
  grpc::Status Elect(grpc::ServerContext* context, const v1::ElectRequest* request,
                     v1::ElectResponse* response) override;

 private:
  JobRegistry* registry_;
};

}  // namespace gradsync::server
