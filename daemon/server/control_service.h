// SPDX-License-Identifier: Apache-2.0
// gRPC Control service: Register and the per-rank Session stream.
#pragma once

#include "daemon/server/job_registry.h"
#include "proto/gradsync/v1/control.grpc.pb.h"

namespace gradsync::server {

struct ControlInfo {
  std::string daemon_version;
  uint64_t max_arena_bytes = 0;
  uint32_t max_name_length = 256;
  std::string handoff_socket_path;
  std::vector<std::string> gpu_uuids;  // told to clients at Register
};

class ControlService final : public v1::Control::Service {
 public:
  ControlService(JobRegistry* registry, ControlInfo info) : registry_(registry), info_(std::move(info)) {}

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  // Blocks for the life of the session on a gRPC thread of its own.
  grpc::Status Session(grpc::ServerContext* context, SessionStream* stream) override;

 private:
  JobRegistry* registry_;
  const ControlInfo info_;
};

// Maps a gradsync Status to a grpc::Status (codes are the same numbers).
grpc::Status toGrpc(const Status& status);

}  // namespace gradsync::server
