// SPDX-License-Identifier: Apache-2.0
#include "client/src/client.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>

#include <chrono>
#include <cstring>

#include "base/dtype.h"
#include "client/src/env.h"
#include "handoff/fd_passing.h"
#include "handoff/frame.h"
#include "handoff/shm_layout.h"

namespace gradsync::client {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds toMillis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

Status fromGrpc(const grpc::Status& status, const std::string& what) {
  return Status(static_cast<StatusCode>(status.error_code()), what + ": " + status.error_message());
}

constexpr const char* kClientVersion = "0.1.0";

}  // namespace

Client::Client(const ClientOptions& options) : options_(options) {
  membership_ = Membership{options.elastic && !options.elastic_join ? uint64_t{1} : uint64_t{0}, options.rank,
                           options.size, options.local_rank, options.local_size};
  std::vector<int> all(std::max(options.size, 0));
  for (int i = 0; i < options.size; ++i) all[i] = i;
  process_sets_.emplace(0, std::move(all));
  int id = 1;
  for (const auto& set : options.process_sets) process_sets_.emplace(id++, set);
}

StatusOr<std::unique_ptr<Client>> Client::connect(const ClientOptions& options) {
  std::unique_ptr<Client> client(new Client(options));
  const std::string target = "unix:" + options.socket_path;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  client->channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  const auto deadline = std::chrono::system_clock::now() + toMillis(options.connect_timeout_seconds);
  if (!client->channel_->WaitForConnected(deadline)) {
    return unavailable("cannot reach gradsyncd at " + target + " within " +
                       std::to_string(options.connect_timeout_seconds) + " s (is the daemon running?)");
  }
  client->stub_ = v1::Control::NewStub(client->channel_);
  // As in Horovod, the root rank writes the log (a joiner is not rank 0 yet).
  if (!options.autotune_log_path.empty() && options.rank == 0 && !options.elastic_join) {
    ASSIGN_OR_RETURN(client->autotune_log_, AutotuneLog::open(options.autotune_log_path));
  }
  RETURN_IF_ERROR(client->registerRank());
  RETURN_IF_ERROR(client->handOffArena());
  RETURN_IF_ERROR(client->openSession());
  if (options.elastic_join) {
    // A joiner has no place until the job's next commit admits it.
    ASSIGN_OR_RETURN(Membership admitted, client->rejoin(options.elastic_timeout_seconds));
    (void)admitted;
    if (!options.join_marker.empty()) {
      UniqueFd marker(::open(options.join_marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      (void)marker;  // best effort: the launcher only decides whether to replace this rank
    }
  }
  RETURN_IF_ERROR(client->startTimelineFromEnvironment());
  return client;
}

Status Client::startTimelineFromEnvironment() {
  const EnvIdentity env = readEnvIdentity();
  if (!env.timeline || membership().rank != 0) return okStatus();
  return startTimeline(*env.timeline, env.timeline_mark_cycles);
}

Status Client::startTimeline(const std::string& path, bool mark_cycles) {
  if (membership().rank != 0) return okStatus();  // rank 0's timeline is the job's, as in Horovod
  UniqueFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (!file.valid()) return failedPrecondition("cannot open the timeline " + path + ": " + std::strerror(errno));
  v1::HandoffRequest request;
  request.mutable_timeline_start()->set_mark_cycles(mark_cycles);
  return handoffCall(request, file.get(), "starting the timeline " + path);
}

Status Client::stopTimeline() {
  if (membership().rank != 0) return okStatus();
  v1::HandoffRequest request;
  request.mutable_timeline_stop();
  return handoffCall(request, -1, "stopping the timeline");
}

Status Client::handoffCall(const v1::HandoffRequest& request, int fd, const std::string& what) {
  v1::HandoffResponse response;
  Status exchanged = exchangeHandoff(request, &response, fd >= 0 ? std::vector<int>{fd} : std::vector<int>{});
  if (!exchanged.isOk()) return Status(exchanged.code(), what + ": " + exchanged.message());
  if (response.code() != 0) return Status(static_cast<StatusCode>(response.code()), what + ": " + response.message());
  return okStatus();
}

Client::~Client() { shutdown(); }

CudaSession& Client::cuda() {
  std::call_once(cuda_once_, [this] {
    CudaSessionOptions options;
    options.daemon_gpus = daemon_gpus_;
    options.daemon_name = "gradsyncd at " + options_.socket_path;
    cuda_ = std::make_unique<CudaSession>(
        options, [] { return loadCudaDriver(); },
        [this](const v1::HandoffRequest& request, v1::HandoffResponse* response, const std::vector<int>& fds) {
          return exchangeHandoff(request, response, fds);
        });
  });
  return *cuda_;
}

Status Client::exchangeHandoff(const v1::HandoffRequest& request, v1::HandoffResponse* response,
                               const std::vector<int>& fds) {
  MutexLock lock(handoff_mutex_);
  if (!handoff_fd_.valid()) return failedPrecondition("the hand-off connection is closed");
  return handoff::exchangeFrames(handoff_fd_.get(), request, response, toMillis(options_.connect_timeout_seconds), fds);
}

Status Client::releaseCudaExports() {
  if (!cuda_) return okStatus();  // nothing was exported
  return cuda_->releaseExports();
}

Status Client::registerRank() {
  v1::RegisterRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  request.set_rank(options_.rank);
  request.set_size(options_.size);
  request.set_local_rank(options_.local_rank);
  request.set_local_size(options_.local_size);
  request.set_elastic(options_.elastic);
  request.set_elastic_join(options_.elastic_join);
  if (options_.elastic) request.set_elastic_timeout_seconds(options_.elastic_timeout_seconds);
  if (options_.elastic) request.set_min_size(options_.min_size > 0 ? options_.min_size : options_.size);
  request.set_autotune(options_.autotune);
  request.set_autotune_warmup_samples(options_.autotune_warmup_samples);
  request.set_autotune_steps_per_sample(options_.autotune_steps_per_sample);
  request.set_autotune_samples_per_setting(options_.autotune_samples_per_setting);
  request.set_autotune_log(autotune_log_ != nullptr);
  for (const auto& set : options_.process_sets) {
    auto* spec = request.add_process_sets();
    for (int rank : set) spec->add_ranks(rank);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  request.set_hostname(host);
  request.set_client_version(kClientVersion);
  request.set_leader_address(options_.leader_address);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + toMillis(options_.connect_timeout_seconds));
  v1::RegisterResponse response;
  grpc::Status status = stub_->Register(&context, request, &response);
  if (!status.ok())
    return fromGrpc(status, "registering rank " + std::to_string(options_.rank) + " of job '" + options_.job_id + "'");
  session_id_ = response.session_id();
  session_secret_ = response.session_secret();
  if (session_secret_.size() != handoff::kSessionSecretBytes) return internalError("daemon sent a malformed secret");
  const uint64_t arena_bytes = std::min<uint64_t>(options_.arena_bytes, response.max_arena_bytes());
  ASSIGN_OR_RETURN(arena_, Arena::create(arena_bytes));
  handoff::ArenaControl* control = arena_->control();
  submit_ring_ = std::make_unique<handoff::RingProducer>(&control->submit, control->submit_slots);
  complete_ring_ = std::make_unique<handoff::RingConsumer>(&control->complete, control->complete_slots);
  handoff_path_ = response.handoff_socket_path();
  daemon_gpus_.assign(response.gpu_uuids().begin(), response.gpu_uuids().end());
  return okStatus();
}

Status Client::handOffArena() {
  handoff_fd_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (handoff_path_.size() >= sizeof(addr.sun_path)) return invalidArgument("hand-off path too long");
  std::strncpy(addr.sun_path, handoff_path_.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(handoff_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return unavailable("cannot connect to the hand-off socket " + handoff_path_ + ": " + std::strerror(errno));
  }
  handoff::HandoffHello hello{};
  hello.magic = handoff::kHandoffMagic;
  hello.version = handoff::kHandoffVersion;
  hello.session_id = session_id_;
  std::memcpy(hello.secret, session_secret_.data(), sizeof(hello.secret));
  RETURN_IF_ERROR(handoff::sendWithFd(handoff_fd_.get(), &hello, sizeof(hello), arena_->fd()));
  handoff::HandoffReply reply{};
  RETURN_IF_ERROR(
      handoff::recvExact(handoff_fd_.get(), &reply, sizeof(reply), toMillis(options_.connect_timeout_seconds)));
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.magic != handoff::kHandoffMagic) return internalError("malformed hand-off reply");
  if (reply.code != 0)
    return Status(static_cast<StatusCode>(reply.code), std::string("hand-off refused: ") + reply.message);
  return okStatus();
}

Status Client::openSession() {
  stream_ = stub_->Session(&stream_context_);
  v1::ClientMessage hello;
  hello.mutable_hello()->set_session_id(session_id_);
  hello.mutable_hello()->set_session_secret(session_secret_);
  if (!send(hello)) return unavailable("session stream closed before hello");
  reader_ = std::thread([this] { readerLoop(); });
  MutexLock lock(mutex_);
  const bool opened = cv_.wait_for(lock, toMillis(options_.connect_timeout_seconds),
                                   [&]() GS_REQUIRES(mutex_) { return session_open_ || !broken_.isOk(); });
  if (session_open_) return okStatus();
  if (!opened) stream_context_.TryCancel();
  return broken_.isOk() ? deadlineExceeded("no session acknowledgement from gradsyncd") : broken_;
}

bool Client::send(const v1::ClientMessage& message) {
  MutexLock lock(write_mutex_);
  return stream_ && stream_->Write(message);
}

void Client::readerLoop() {
  v1::DaemonMessage message;
  while (stream_->Read(&message)) {
    switch (message.msg_case()) {
      case v1::DaemonMessage::kHelloAck: {
        MutexLock lock(mutex_);
        session_open_ = true;
        cv_.notify_all();
        break;
      }
      case v1::DaemonMessage::kDone:
        onDone(message.done());
        break;
      case v1::DaemonMessage::kOutputRequest:
        onOutputRequest(message.output_request());
        break;
      case v1::DaemonMessage::kMembershipChange:
        onMembershipChange(message.membership_change());
        break;
      case v1::DaemonMessage::kAutotuneSample:
        if (autotune_log_) autotune_log_->write(message.autotune_sample());
        break;
      default:
        break;
    }
  }
  grpc::Status status = stream_->Finish();
  MutexLock lock(mutex_);
  broken_ = shut_down_ ? cancelled("client shut down")
                       : Status(StatusCode::kUnavailable,
                                "session with gradsyncd ended: " +
                                    (status.ok() ? std::string("closed by the daemon") : status.error_message()));
  failAllLocked(broken_);
  session_open_ = false;
  reader_done_ = true;
  wakeWaiters();
}

void Client::onDone(const v1::Done& done) {
  {
    MutexLock lock(mutex_);
    applyDoneLocked(done);
  }
  wakeWaiters();
}

void Client::wakeWaiters() {
  cv_.notify_all();
  if (arena_) handoff::RingConsumer::wakeAll(&arena_->control()->complete);
}

void Client::drainCompletionsLocked() {
  if (ring_reader_ || !complete_ring_) return;
  std::string bytes;
  v1::Done done;
  bool applied = false;
  for (;;) {
    bool got = false;
    if (!complete_ring_->pop(&bytes, &got).isOk() || !got) break;
    if (done.ParseFromString(bytes)) applyDoneLocked(done);
    applied = true;
  }
  if (applied) cv_.notify_all();
}

void Client::applyDoneLocked(const v1::Done& done) {
  auto it = ops_.find(done.handle());
  if (it == ops_.end() || it->second->done) return;
  Operation& op = *it->second;
  op.status = Status(static_cast<StatusCode>(done.code()), done.message());
  op.output_shape.assign(done.output_shape().begin(), done.output_shape().end());
  op.received_splits.assign(done.received_splits().begin(), done.received_splits().end());
  op.last_joined_rank = done.last_joined_rank();
  op.process_set_id = done.process_set_id();
  op.membership_changed = done.detail().membership_changed();
  op.epoch_changed = done.epoch_changed();
  op.done = true;
}

void Client::onOutputRequest(const v1::OutputRequest& request) {
  v1::ClientMessage message;
  v1::OutputGrant* grant = message.mutable_output_grant();
  grant->set_handle(request.handle());
  {
    MutexLock lock(mutex_);
    auto it = ops_.find(request.handle());
    if (it == ops_.end() || it->second->has_output) {
      grant->set_error("unknown handle or output already granted");
    } else {
      auto offset = arena_->allocate(request.length());
      if (!offset.isOk()) {
        grant->set_error(offset.status().message());
      } else {
        it->second->has_output = true;
        it->second->output_offset = *offset;
        it->second->output_length = request.length();
        grant->set_offset(*offset);
        grant->set_length(request.length());
      }
    }
  }
  send(message);
}

void Client::failAllLocked(const Status& status) {
  for (auto& [handle, op] : ops_) {
    if (op->done) continue;
    op->status = status;
    op->done = true;
  }
}

}  // namespace gradsync::client
