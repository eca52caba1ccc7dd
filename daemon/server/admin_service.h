// SPDX-License-Identifier: Apache-2.0
// gRPC Admin service for gradsyncctl.
#pragma once

#include <chrono>
#include <functional>

#include "daemon/server/job_registry.h"
#include "proto/gradsync/v1/admin.grpc.pb.h"

namespace gradsync::server {

struct DaemonFacts {
  std::string version;
  std::string hostname;
  int64_t pid = 0;
  int cuda_devices = 0;
  int nccl_version = 0;
  std::string peer_address;
  v1::DaemonConfig config;
  std::chrono::steady_clock::time_point started;
};

class AdminService final : public v1::Admin::Service {
 public:
  AdminService(const JobRegistry* registry, DaemonFacts facts) : registry_(registry), facts_(std::move(facts)) {}

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*, v1::GetStatusResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;

 private:
  const JobRegistry* registry_;
  const DaemonFacts facts_;
};

}  // namespace gradsync::server
