// SPDX-License-Identifier: Apache-2.0
// The composition root: owns every part of a running gradsyncd.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/common/budget.h"
#include "daemon/exe/service_notifier.h"
#include "daemon/executor/reduce_pool.h"
#include "daemon/gpu/gpu_node.h"
#include "daemon/gpu/nccl_library.h"
#include "daemon/metrics/http_exporter.h"
#include "daemon/server/admin_service.h"
#include "daemon/server/control_service.h"
#include "daemon/server/handoff_server.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/peer_service.h"
#include "proto/gradsync/v1/config.pb.h"

namespace gradsync::exe {

constexpr const char* kVersion = "0.1.0";

// Makes the node's GPUs from the inventory the daemon probed (which it may
// amend); null: none. Default: the real GPUs through CUDA (tests of the GPU
// path on machines without one give host-memory doubles).
using GpuFactory = std::function<std::unique_ptr<gpu::GpuNode>(gpu::GpuInventory* inventory)>;

class Daemon {
 public:
  // Binds both sockets and starts serving. Errors: the socket is in use by a
  // running daemon, a path cannot be bound, the group does not exist.
  static StatusOr<std::unique_ptr<Daemon>> start(const v1::DaemonConfig& config, GpuFactory make_gpus = nullptr);
  ~Daemon();

  // Fails every job in flight ("daemon shutting down"), stops the servers
  // and removes the sockets. Idempotent.
  void shutdown();

  // SIGHUP: applies what of `fresh` can change while running (log_level)
  // and returns the names of the other fields that differ from the
  // configuration in effect: they need a restart.
  std::vector<std::string> reload(const v1::DaemonConfig& fresh);

 private:
  Daemon(const v1::DaemonConfig& config, GpuFactory make_gpus) : config_(config), make_gpus_(std::move(make_gpus)) {}
  Status startServers();
  // This node's facts for gradsyncctl (host, GPUs, NCCL, configuration),
  // with the GPUs and NCCL opened.
  server::DaemonFacts probeNode();
  // The Control and Admin services on the unix socket, with its mode and
  // group (`gid`, -1: unchanged).
  Status startControlSocket(int gid);
  // Binds the peer service (TCP) when configured; returns its address.
  StatusOr<std::string> startPeerServer();
  void housekeepingLoop();
  // Serves the Prometheus endpoint when metrics_address is set.
  Status startMetrics();
  std::string prometheusText() const;
  // "serving: 2 jobs, 8 ranks" (systemd's STATUS=).
  std::string statusLine() const;
  // The health status of the gRPC services (grpc.health.v1): `serving`
  // false while draining (Control only).
  void setServing(bool serving);
  // Loads NCCL (GRADSYNC_NCCL_LIBRARY, else the loader's libnccl.so.2); a
  // node without it runs everything but GPU collectives.
  void loadNccl(server::DaemonFacts* facts);

  const v1::DaemonConfig config_;
  const GpuFactory make_gpus_;
  ServiceNotifier notifier_;
  std::unique_ptr<gpu::NcclLibrary> nccl_;
  std::unique_ptr<gpu::GpuNode> gpus_;  // null without GPUs
  std::unique_ptr<executor::ReducePool> pool_;
  // Before the registry: sessions hold leases on them until they go.
  std::unique_ptr<Budget> arena_budget_, ipc_budget_;
  std::unique_ptr<server::JobRegistry> registry_;
  std::unique_ptr<server::ControlService> control_;
  std::unique_ptr<server::AdminService> admin_;
  std::unique_ptr<server::HandoffServer> handoff_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<server::PeerService> peer_;
  std::unique_ptr<grpc::Server> peer_server_;
  std::unique_ptr<metrics::HttpExporter> metrics_;  // null unless metrics_address is set

  Mutex mutex_;
  CondVar stop_cv_;
  bool stopping_ GS_GUARDED_BY(mutex_) = false;
  bool drained_ = false;     // housekeeping thread only
  bool owner_gone_ = false;  // housekeeping thread only: exit_with_pid has exited
  std::thread housekeeping_;
};

}  // namespace gradsync::exe
