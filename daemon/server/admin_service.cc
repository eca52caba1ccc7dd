// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/admin_service.h"

namespace gradsync::server {

grpc::Status AdminService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                     v1::GetStatusResponse* response) {
  response->set_version(facts_.version);
  response->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - facts_.started).count());
  response->set_pid(facts_.pid);
  response->set_hostname(facts_.hostname);
  *response->mutable_config() = facts_.config;
  response->set_jobs(static_cast<int>(registry_->jobCount()));
  response->set_cuda_devices(facts_.cuda_devices);
  response->set_nccl_version(facts_.nccl_version);
  response->set_peer_address(facts_.peer_address);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                    v1::ListJobsResponse* response) {
  for (auto& info : registry_->jobInfos(request->job_id())) *response->add_jobs() = std::move(info);
  return grpc::Status::OK;
}

}  // namespace gradsync::server
