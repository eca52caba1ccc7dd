// SPDX-License-Identifier: Apache-2.0
// gRPC Admin service for gradsyncctl.
#pragma once

#include <chrono>
#include <functional>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/gpu/gpu_inventory.h"
#include "daemon/server/job_registry.h"
#include "proto/gradsync/v1/admin.grpc.pb.h"

namespace gradsync::server {

struct DaemonFacts {
  std::string version;
  std::string hostname;
  int64_t pid = 0;
  gpu::GpuInventory gpus;
  int nccl_version = 0;      // 0: NCCL could not be loaded (nccl_note says why)
  std::string nccl_library;  // the file loaded
  std::string nccl_note;
  std::string peer_address;
  v1::DaemonConfig config;
  std::chrono::steady_clock::time_point started;
};

class AdminService final : public v1::Admin::Service {
 public:
  AdminService(JobRegistry* registry, DaemonFacts facts)
      : registry_(registry), facts_(std::move(facts)), config_(facts_.config) {}

  // The configuration in effect, as GetStatus reports it (a reload changes
  // the fields it applies).
  v1::DaemonConfig config() const;
  void setConfig(const v1::DaemonConfig& config);

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*, v1::GetStatusResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status ControlTimeline(grpc::ServerContext*, const v1::ControlTimelineRequest* request,
                               v1::ControlTimelineResponse* response) override;
  grpc::Status SetDraining(grpc::ServerContext*, const v1::SetDrainingRequest* request,
                           v1::SetDrainingResponse* response) override;
  grpc::Status ListTensors(grpc::ServerContext*, const v1::ListTensorsRequest* request,
                           v1::ListTensorsResponse* response) override;

  // Called with the new state after the registry took a drain or undrain
  // (the daemon updates health and exits when a drain finds no job).
  void onDrainingChanged(std::function<void(bool)> hook) { draining_hook_ = std::move(hook); }

 private:
  JobRegistry* registry_;
  std::function<void(bool)> draining_hook_;  // set before serving
  const DaemonFacts facts_;                  // facts_.config: as started
  mutable Mutex config_mutex_;
  v1::DaemonConfig config_ GS_GUARDED_BY(config_mutex_);
};

}  // namespace gradsync::server
