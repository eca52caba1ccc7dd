// SPDX-License-Identifier: Apache-2.0
#include "daemon/exe/daemon.h"

#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "daemon/common/environment.h"
#include "daemon/common/logging.h"
#include "daemon/gpu/gpu_inventory.h"
#include "daemon/metrics/prometheus.h"
#include "daemon/peer/tls.h"
#include "proto/grpc/health/v1/health.pb.h"

namespace gradsync::exe {
namespace {

// A socket file left by a daemon that died is removed; one that still
// accepts connections belongs to a running daemon: refuse to start.
Status claimSocketPath(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return okStatus();
  if (!S_ISSOCK(st.st_mode)) return failedPrecondition(path + " exists and is not a socket");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  if (live) return failedPrecondition("another gradsyncd is serving " + path);
  ::unlink(path.c_str());
  return okStatus();
}

StatusOr<int> groupId(const std::string& name) {
  if (name.empty()) return -1;
  std::vector<char> buffer(16384);
  group g{};
  group* found = nullptr;
  if (::getgrnam_r(name.c_str(), &g, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return notFound("socket group '" + name + "' does not exist");
  }
  return static_cast<int>(found->gr_gid);
}

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// The limits of the daemon's jobs, from its configuration.
server::RegistryLimits registryLimits(const v1::DaemonConfig& config, gpu::GpuNode* gpus,
                                      const gpu::NcclLibrary* nccl) {
  server::RegistryLimits limits;
  limits.job.fusion_threshold_bytes = config.fusion_threshold_bytes();
  limits.job.stall_warning = std::chrono::seconds(config.stall_warning_seconds());
  limits.job.stall_deadline = std::chrono::seconds(config.stall_deadline_seconds());
  // A rank that does not give room for its output (stopped, hung) is a
  // stall too: it ends no later than the stall deadline.
  if (config.stall_deadline_seconds() > 0) {
    limits.job.output_grant_timeout = std::min(limits.job.output_grant_timeout, limits.job.stall_deadline);
  }
  limits.max_jobs = config.max_jobs();
  limits.max_local_ranks = config.max_local_ranks();
  limits.max_job_size = config.max_job_size();
  limits.job.max_inflight_per_rank = config.max_inflight_per_rank();
  limits.job.data_plane = {config.data_plane_devices(), config.data_plane_tcp_segment_bytes()};
  limits.job.hostname = hostName();
  limits.job.topology = config.topology();
  limits.job.membership_part_bytes = config.membership_part_bytes();
  limits.job.join_timeout = std::chrono::seconds(config.join_timeout_seconds());
  limits.job.cycle_time = std::chrono::milliseconds(config.cycle_time_ms());
  limits.job.autotune = config.autotune();
  limits.job.autotune_options.warmup_samples = config.autotune_warmup_samples();
  limits.job.autotune_options.steps_per_sample = config.autotune_steps_per_sample();
  limits.job.autotune_options.samples_per_setting = config.autotune_samples_per_setting();
  limits.job.response_cache_capacity = config.response_cache_capacity();
  limits.job.gpus = gpus;
  limits.job.nccl = nccl;
  limits.job.nccl_between_daemons = config.gpu_cross_node() == "auto";
  limits.job.leader_failover = config.leader_failover() == "quorum";
  limits.job.steady_state_rounds = config.steady_state() == "rounds";
  limits.job.link_cost = config.link_cost();
  limits.job.leader_rounds = config.steady_state() != "leader";
  return limits;
}

}  // namespace

StatusOr<std::unique_ptr<Daemon>> Daemon::start(const v1::DaemonConfig& config, GpuFactory make_gpus) {
  RETURN_IF_ERROR(setLogLevel(config.log_level()));
  std::unique_ptr<Daemon> daemon(new Daemon(config, std::move(make_gpus)));
  RETURN_IF_ERROR(daemon->startServers());
  return daemon;
}

Status Daemon::startServers() {
  // Every server built from here on serves grpc.health.v1.Health (probes,
  // grpcurl) and reflection (grpcurl list/describe). Linking the health
  // descriptor lets reflection describe the health service too.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  ASSIGN_OR_RETURN(int gid, groupId(config_.socket_group()));
  RETURN_IF_ERROR(claimSocketPath(config_.socket_path()));
  RETURN_IF_ERROR(claimSocketPath(config_.handoff_socket_path()));

  server::DaemonFacts facts = probeNode();

  const std::string no_gpu_reason = "gradsyncd on host " + facts.hostname + " has no GPU" +
                                    (facts.gpus.note.empty() ? "" : " (" + facts.gpus.note + ")");

  pool_ = std::make_unique<executor::ReducePool>(static_cast<int>(config_.reduce_threads()));
  server::RegistryLimits limits = registryLimits(config_, gpus_.get(), nccl_.get());
  limits.job.no_gpu_reason = no_gpu_reason;
  registry_ = std::make_unique<server::JobRegistry>(limits, pool_.get());
  ASSIGN_OR_RETURN(const std::string peer_address, startPeerServer());
  registry_->setPeerAddress(peer_address);

  server::ControlInfo control_info{kVersion, config_.max_arena_bytes(), limits.job.max_name_length,
                                   config_.handoff_socket_path(), gpus_ ? gpus_->uuids() : std::vector<std::string>()};
  control_ = std::make_unique<server::ControlService>(registry_.get(), control_info);
  facts.peer_address = peer_address;
  admin_ = std::make_unique<server::AdminService>(registry_.get(), facts);
  admin_->onDrainingChanged([this](bool draining) { setServing(!draining); });
  RETURN_IF_ERROR(startMetrics());  // before the sockets accept: a bad address fails the start

  arena_budget_ = std::make_unique<Budget>("arena bytes", config_.max_total_arena_bytes());
  ipc_budget_ = std::make_unique<Budget>("CUDA IPC mappings", config_.max_ipc_mappings());
  const server::HandoffLimits handoff_limits{config_.max_arena_bytes(), arena_budget_.get(),
                                             config_.max_ipc_mappings_per_rank(), ipc_budget_.get()};
  handoff_ = std::make_unique<server::HandoffServer>(registry_.get(), handoff_limits, gpus_.get(), no_gpu_reason);
  RETURN_IF_ERROR(handoff_->start(config_.handoff_socket_path(), config_.socket_mode(), gid));

  RETURN_IF_ERROR(startControlSocket(gid));
  setServing(true);
  housekeeping_ = std::thread([this] { housekeepingLoop(); });
  notifier_.ready(statusLine());
  GS_LOG(main, info, "gradsyncd {} serving on unix:{} (hand-off {}), {} reduce threads", kVersion,
         config_.socket_path(), config_.handoff_socket_path(), config_.reduce_threads());
  return okStatus();
}

server::DaemonFacts Daemon::probeNode() {
  server::DaemonFacts facts;
  facts.version = kVersion;
  facts.hostname = hostName();
  facts.pid = static_cast<int64_t>(::getpid());
  facts.gpus = gpu::probeGpus();
  gpus_ = make_gpus_ ? make_gpus_(&facts.gpus) : gpu::GpuNode::create(facts.gpus);
  if (gpus_ && config_.virtual_gpus_per_gpu() > 1) gpus_->virtualize(config_.virtual_gpus_per_gpu(), &facts.gpus);
  facts.config = config_;
  facts.started = std::chrono::steady_clock::now();
  loadNccl(&facts);
  GS_LOG(main, info, "GPUs: {}{}; MPS {}; NCCL {}", facts.gpus.gpus.size(),
         facts.gpus.note.empty() ? "" : " (" + facts.gpus.note + ")", facts.gpus.mps ? "on" : "off",
         nccl_ ? gpu::ncclVersionString(facts.nccl_version) + " from " + facts.nccl_library : facts.nccl_note);
  for (const auto& g : facts.gpus.gpus) {
    GS_LOG(main, info, "GPU {}: {} {} ({} MiB, compute mode {}, PCI {}, NUMA node {})", g.index, g.uuid, g.name,
           g.total_memory_bytes >> 20, g.compute_mode, g.pci_bus_id, g.numa_node);
  }
  return facts;
}

Status Daemon::startControlSocket(int gid) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + config_.socket_path(), grpc::InsecureServerCredentials());
  builder.RegisterService(control_.get());
  builder.RegisterService(admin_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes()));
  // The socket is created inside BuildAndStart: a umask keeps it closed to
  // others from its first moment; chmod/chown then set the exact mode.
  const mode_t old_umask = ::umask(0777 & ~config_.socket_mode());
  grpc_server_ = builder.BuildAndStart();
  ::umask(old_umask);
  if (!grpc_server_) return unavailable("cannot serve gRPC on unix:" + config_.socket_path());
  if (::chmod(config_.socket_path().c_str(), config_.socket_mode()) != 0 ||
      (gid >= 0 && ::chown(config_.socket_path().c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid)) != 0)) {
    return internalError("cannot set permissions of " + config_.socket_path() + ": " + std::strerror(errno));
  }
  return okStatus();
}

void Daemon::loadNccl(server::DaemonFacts* facts) {
  auto nccl = gpu::NcclLibrary::load(environment::ncclLibrary());
  if (!nccl.isOk()) {
    facts->nccl_note = nccl.status().message();
    return;
  }
  nccl_ = std::move(*nccl);
  facts->nccl_version = nccl_->version();
  facts->nccl_library = nccl_->path();
}

StatusOr<std::string> Daemon::startPeerServer() {
  if (config_.peer_address().empty()) return std::string();
  ASSIGN_OR_RETURN(auto credentials, peer::loadPeerCredentials(config_));
  registry_->setPeerCredentials(credentials.client);
  const std::string& wanted = config_.peer_address();
  const size_t colon = wanted.rfind(':');
  if (colon == std::string::npos) return invalidArgument("peer_address '" + wanted + "' is not host:port");
  peer_ = std::make_unique<server::PeerService>(registry_.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(wanted, credentials.server, &port);
  builder.RegisterService(peer_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes()));
  // Notice a silent follower as the follower notices a silent leader.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  peer_server_ = builder.BuildAndStart();
  if (!peer_server_ || port == 0) return unavailable("cannot serve the peer service on " + wanted);
  std::string host = wanted.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = hostName();
  const std::string address = host + ":" + std::to_string(port);
  GS_LOG(main, info, "peer service on {}{}", address, credentials.tls ? " (mutual TLS)" : "");
  return address;
}

Status Daemon::startMetrics() {
  if (config_.metrics_address().empty()) return okStatus();
  ASSIGN_OR_RETURN(metrics_,
                   metrics::HttpExporter::start(config_.metrics_address(), [this] { return prometheusText(); }));
  GS_LOG(main, info, "Prometheus metrics on http://{}/metrics", metrics_->address());
  return okStatus();
}

std::string Daemon::prometheusText() const {
  v1::GetStatusResponse status;
  v1::ListJobsResponse jobs;
  (void)admin_->GetStatus(nullptr, nullptr, &status);
  const v1::ListJobsRequest all;
  (void)admin_->ListJobs(nullptr, &all, &jobs);
  return metrics::renderPrometheus(status, jobs);
}

void Daemon::setServing(bool serving) {
  // Control goes with new jobs (drain); the others only with shutdown.
  if (auto* health = grpc_server_ ? grpc_server_->GetHealthCheckService() : nullptr) {
    health->SetServingStatus(v1::Control::service_full_name(), serving);
    health->SetServingStatus(v1::Admin::service_full_name(), true);
  }
  // The peer port answers for Control too: Kubernetes probes reach TCP only.
  if (auto* health = peer_server_ ? peer_server_->GetHealthCheckService() : nullptr) {
    health->SetServingStatus(v1::Peer::service_full_name(), true);
    health->SetServingStatus(v1::Control::service_full_name(), serving);
  }
}

std::string Daemon::statusLine() const {
  const size_t jobs = registry_->jobCount();
  const size_t ranks = registry_->sessionCount();
  return std::string(registry_->draining() ? "draining" : "serving") + ": " + std::to_string(jobs) +
         (jobs == 1 ? " job, " : " jobs, ") + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
}

void Daemon::housekeepingLoop() {
  // Stall checks need second granularity; 100 ms keeps the daemon idle when
  // nothing happens (the data path never waits for this loop). The systemd
  // watchdog is fed from here: a stuck loop means a stuck daemon.
  const auto period = std::chrono::milliseconds(std::max<uint32_t>(100, config_.cycle_time_ms()));
  MutexLock lock(mutex_);
  while (!stop_cv_.wait_for(lock, period, [&]() GS_REQUIRES(mutex_) { return stopping_; })) {
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    registry_->housekeeping(now);
    notifier_.watchdog(now);
    notifier_.status(statusLine());
    const pid_t owner = static_cast<pid_t>(config_.exit_with_pid());
    if (owner > 0 && !owner_gone_ && ::kill(owner, 0) != 0 && errno == ESRCH) {
      owner_gone_ = true;
      GS_LOG(main, warn, "process {} (this daemon's owner, --exit-with-pid) has exited; exiting", owner);
      ::kill(::getpid(), SIGTERM);
    }
    if (registry_->draining() && registry_->jobCount() == 0 && !drained_) {
      // The same way out as SIGTERM: the main thread's signal wait.
      drained_ = true;
      GS_LOG(main, warn, "drained: no job left; exiting");
      ::kill(::getpid(), SIGTERM);
    }
    lock.lock();
  }
}

namespace {
// A config field's value as text (a sub-message whole), for comparing.
std::string fieldText(const google::protobuf::Message& message, const google::protobuf::FieldDescriptor* field) {
  if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
    return message.GetReflection()->GetMessage(message, field).SerializeAsString();
  }
  std::string text;
  google::protobuf::TextFormat::PrintFieldValueToString(message, field, -1, &text);
  return text;
}
}  // namespace

std::vector<std::string> Daemon::reload(const v1::DaemonConfig& fresh) {
  notifier_.reloading();
  v1::DaemonConfig applied = admin_->config();
  std::vector<std::string> need_restart;
  const auto* descriptor = v1::DaemonConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (fieldText(applied, field) == fieldText(fresh, field)) continue;
    if (field->name() != "log_level") {
      need_restart.push_back(field->name());
      continue;
    }
    const Status set = setLogLevel(fresh.log_level());
    if (set.isOk()) {
      applied.set_log_level(fresh.log_level());
      GS_LOG(main, info, "reload: log_level is now {}", fresh.log_level());
    } else {
      GS_LOG(main, err, "reload: log_level not changed: {}", set.message());
    }
  }
  admin_->setConfig(applied);
  std::string names;
  for (const auto& name : need_restart) names += (names.empty() ? "" : ", ") + name;
  if (!need_restart.empty()) {
    GS_LOG(main, warn, "reload: these changed fields need a restart and were not applied: {}", names);
  } else {
    GS_LOG(main, info, "reload: nothing else changed");
  }
  notifier_.ready(statusLine());
  return need_restart;
}

void Daemon::shutdown() {
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  notifier_.stopping();
  // Probes see NOT_SERVING from here on (every service, the server's too).
  for (grpc::Server* server : {grpc_server_.get(), peer_server_.get()}) {
    if (server != nullptr && server->GetHealthCheckService() != nullptr) server->GetHealthCheckService()->Shutdown();
  }
  stop_cv_.notify_all();
  if (housekeeping_.joinable()) housekeeping_.join();
  GS_LOG(main, info, "shutting down");
  metrics_.reset();  // no scrape reads the registry past here
  if (registry_) registry_->stopAll("daemon shutting down");
  if (handoff_) handoff_->stop();
  if (grpc_server_) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc_server_->Wait();
  }
  if (peer_server_) {
    peer_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    peer_server_->Wait();
  }
  ::unlink(config_.socket_path().c_str());
}

Daemon::~Daemon() { shutdown(); }

}  // namespace gradsync::exe
