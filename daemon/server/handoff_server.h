// SPDX-License-Identifier: Apache-2.0
// The hand-off socket: receives each session's arena (memfd over
// SCM_RIGHTS), then serves the session's CUDA frames (attach, exports,
// releases) and watches the connection: its end means the rank is gone.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "daemon/common/budget.h"
#include "daemon/gpu/gpu_node.h"
#include "daemon/server/job_registry.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

// What clients may hand over: arena bytes (one client's, and all clients'
// together through `arena_budget`), CUDA IPC mappings (one client's, and
// all together through `ipc_budget`). The budgets outlive the server and
// every session.
struct HandoffLimits {
  uint64_t max_arena_bytes = uint64_t{64} << 30;
  Budget* arena_budget = nullptr;
  uint32_t max_ipc_mappings_per_rank = 65536;
  Budget* ipc_budget = nullptr;
};

class HandoffServer {
 public:
  // `gpus` is null on a node without GPUs; `no_gpu_reason` then says why
  // (it ends every CUDA request from a client).
  HandoffServer(JobRegistry* registry, HandoffLimits limits, gpu::GpuNode* gpus, std::string no_gpu_reason)
      : registry_(registry), limits_(limits), gpus_(gpus), no_gpu_reason_(std::move(no_gpu_reason)) {}
  ~HandoffServer();

  // Binds and listens on a SOCK_SEQPACKET Unix socket at `path` with
  // permission bits `mode`, then serves on a thread of its own.
  Status start(const std::string& path, uint32_t mode, int gid);
  void stop();

 private:
  struct Connection {
    UniqueFd fd;
    uint64_t session_id = 0;  // 0 until the hello was accepted
    std::chrono::steady_clock::time_point accepted;
  };
  void loop();
  void acceptOne();
  void onReadable(int fd);
  Status handleHello(Connection& connection);
  // A frame after the hello; false when the connection ended.
  bool handleFrame(Connection& connection);
  // `fds`: the descriptors that came with the frame (a timeline's file, a
  // cuMem export's chunks).
  v1::HandoffResponse handleRequest(Session& session, const v1::HandoffRequest& request, std::vector<UniqueFd> fds);
  Status controlTimeline(Session& session, const v1::HandoffRequest& request, UniqueFd fd);
  Status attachGpu(Session& session, const v1::CudaAttach& request, v1::HandoffResponse* response);
  void closeConnection(int fd, const std::string& cause);
  void expireSilent();

  JobRegistry* registry_;
  const HandoffLimits limits_;
  gpu::GpuNode* const gpus_;
  const std::string no_gpu_reason_;
  std::string path_;
  UniqueFd listen_fd_;
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;  // eventfd that stops the loop
  std::map<int, Connection> connections_;
  uint32_t next_color_ = 0;  // staggers arena addresses (see ShmArena::map)
  std::thread thread_;
};

}  // namespace gradsync::server
