// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/admin_service.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "daemon/common/logging.h"

namespace gradsync::server {

v1::DaemonConfig AdminService::config() const {
  MutexLock lock(config_mutex_);
  return config_;
}

void AdminService::setConfig(const v1::DaemonConfig& config) {
  MutexLock lock(config_mutex_);
  config_ = config;
}

grpc::Status AdminService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                     v1::GetStatusResponse* response) {
  response->set_version(facts_.version);
  response->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - facts_.started).count());
  response->set_pid(facts_.pid);
  response->set_hostname(facts_.hostname);
  *response->mutable_config() = config();
  response->set_jobs(static_cast<int>(registry_->jobCount()));
  response->set_cuda_devices(static_cast<int>(facts_.gpus.gpus.size()));
  for (const auto& gpu : facts_.gpus.gpus) {
    v1::GpuInfo* info = response->add_gpus();
    info->set_index(gpu.index);
    info->set_uuid(gpu.uuid);
    info->set_name(gpu.name);
    info->set_total_memory_bytes(gpu.total_memory_bytes);
    info->set_compute_mode(gpu.compute_mode);
    info->set_pci_bus_id(gpu.pci_bus_id);
    info->set_numa_node(gpu.numa_node);
    for (const auto& peer : gpu.peers) {
      v1::GpuPeerLink* link = info->add_peers();
      link->set_index(peer.index);
      link->set_access(peer.access);
      link->set_performance_rank(peer.performance_rank);
      link->set_native_atomics(peer.native_atomics);
    }
  }
  response->set_gpu_note(facts_.gpus.note);
  response->set_cuda_driver_version(facts_.gpus.driver_version);
  response->set_mps(facts_.gpus.mps);
  response->set_mps_pipe_directory(facts_.gpus.mps_pipe);
  response->set_nccl_version(facts_.nccl_version);
  response->set_nccl_library(facts_.nccl_library);
  response->set_nccl_note(facts_.nccl_note);
  response->set_peer_address(facts_.peer_address);
  response->set_draining(registry_->draining());
  return grpc::Status::OK;
}

grpc::Status AdminService::SetDraining(grpc::ServerContext*, const v1::SetDrainingRequest* request,
                                       v1::SetDrainingResponse* response) {
  const bool was = registry_->draining();
  registry_->setDraining(request->draining());
  const size_t jobs = registry_->jobCount();
  if (was != request->draining()) {
    GS_LOG(admin, warn, "{} by gradsyncctl: {} jobs running{}", request->draining() ? "draining" : "drain cancelled",
           jobs, request->draining() ? "; no new jobs, exiting once none is left" : "; taking new jobs again");
  }
  if (draining_hook_) draining_hook_(request->draining());
  response->set_draining(request->draining());
  response->set_jobs(static_cast<int>(jobs));
  return grpc::Status::OK;
}

grpc::Status AdminService::ListTensors(grpc::ServerContext*, const v1::ListTensorsRequest* request,
                                       v1::ListTensorsResponse* response) {
  for (auto& tensors : registry_->jobTensors(request->job_id())) *response->add_jobs() = std::move(tensors);
  return grpc::Status::OK;
}

grpc::Status AdminService::ControlTimeline(grpc::ServerContext*, const v1::ControlTimelineRequest* request,
                                           v1::ControlTimelineResponse* response) {
  auto job = registry_->findJob(request->job_id());
  if (!job) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + request->job_id() + "' on this daemon");
  if (!request->start()) {
    job->stopTimeline();
    return grpc::Status::OK;
  }
  const std::string& file = request->file();
  if (file.empty() || file.size() > 255 || file.find('/') != std::string::npos || file == "." || file == "..") {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the timeline file must be a name inside the daemon's timeline_dir (" +
                            facts_.config.timeline_dir() + "), without '/', got '" + file + "'");
  }
  const std::string& dir = facts_.config.timeline_dir();
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "cannot create timeline_dir " + dir + ": " + std::strerror(errno));
  }
  const std::string path = dir + "/" + file;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640));
  if (!fd.valid()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "cannot open " + path + ": " + std::strerror(errno));
  }
  Status started = job->startTimeline(std::move(fd), request->mark_cycles());
  if (!started.isOk()) return grpc::Status(static_cast<grpc::StatusCode>(started.code()), started.message());
  GS_LOG(main, info, "job '{}': timeline started by gradsyncctl in {}", request->job_id(), path);
  response->set_path(path);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                    v1::ListJobsResponse* response) {
  for (auto& info : registry_->jobInfos(request->job_id(), request->include_ended())) {
    *response->add_jobs() = std::move(info);
  }
  return grpc::Status::OK;
}

}  // namespace gradsync::server
