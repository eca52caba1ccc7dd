// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_join.h"

#include <algorithm>

#include "daemon/common/logging.h"

namespace gradsync::peer {

Status readRestOfMembers(v1::Peer::StubInterface* stub, const std::string& job_id, const std::string& token,
                         uint64_t epoch, int32_t node_count, NodeList* nodes) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
  Status read = readMembers(stub, job_id, token, epoch, node_count, nodes, deadline);
  if (read.isOk()) {
    GS_LOG(control, info, "job '{}': read the membership of epoch {} from the leader in parts ({} nodes)", job_id,
           epoch, node_count);
    return read;
  }
  return Status(read.code(), "job '" + job_id + "': " + read.message());
}

void LeaderJoin::stop() {
  {
    MutexLock lock(mutex_);
    stopped_ = true;
    if (call_ != nullptr) call_->TryCancel();
  }
  ended_cv_.notify_all();
}

void LeaderJoin::abort(const std::string& reason) {
  {
    MutexLock lock(mutex_);
    if (aborted_.empty()) aborted_ = reason;
    if (call_ != nullptr) call_->TryCancel();
  }
  ended_cv_.notify_all();
}

Status LeaderJoin::beginCallLocked(grpc::ClientContext* context) {
  if (stopped_) return cancelled("job stopped while joining");
  if (!aborted_.empty()) return cancelled("job '" + options_.job_id + "' failed while joining: " + aborted_);
  call_ = context;
  return okStatus();
}

StatusOr<grpc::Status> LeaderJoin::callOnce(v1::Peer::Stub* stub, const v1::JoinJobRequest& request,
                                            CrossClock::time_point deadline, bool connected,
                                            v1::JoinJobResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::milliseconds>(deadline - CrossClock::now()));
  {
    MutexLock lock(mutex_);
    RETURN_IF_ERROR(beginCallLocked(&context));
  }
  // Not connected: the call fails at once, with gRPC's reason (refused,
  // or a TLS handshake the leader rejected).
  grpc::Status called = stub->JoinJob(&context, request, response);
  Status read = okStatus();
  if (called.ok() && response->node_count() > 0) {
    read = readRestOfMembers(stub, options_.job_id, options_.token, response->epoch(), response->node_count(),
                             response->mutable_nodes());
  }
  {
    MutexLock lock(mutex_);
    call_ = nullptr;
  }
  if (!read.isOk()) return unavailable(read.message() + " (joined the leader at " + options_.leader_address + ")");
  if (!connected && called.error_code() == grpc::StatusCode::UNAVAILABLE) {
    called = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "its peer service accepts no connection (" + called.error_message() + ")");
  }
  return called;
}

StatusOr<v1::JoinJobResponse> LeaderJoin::join(grpc::Channel* channel, v1::Peer::Stub* stub,
                                               const v1::JoinJobRequest& request) {
  const auto deadline = CrossClock::now() + options_.join_timeout;
  const std::string leader = "the leader at " + options_.leader_address;
  grpc::Status last;
  grpc::Status reason;   // the last failure that says more than the deadline
  bool reached = false;  // the leader's daemon accepted a connection once
  bool told_waiting = false;
  while (CrossClock::now() < deadline) {
    // Connected first: a call that then breaks off (UNAVAILABLE) means the
    // leader's daemon died or was cut off while the job was forming, which
    // is final; one that cannot connect yet is retried until the deadline.
    const bool connected = channel->WaitForConnected(
        std::chrono::system_clock::now() +
        std::min<std::chrono::milliseconds>(
            std::chrono::seconds(1),
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - CrossClock::now())));
    if (reached && !connected) {
      return unavailable("job '" + options_.job_id + "': lost " + leader +
                         " while the job was forming: its daemon no longer accepts connections");
    }
    reached = reached || connected;
    v1::JoinJobResponse response;
    ASSIGN_OR_RETURN(last, callOnce(stub, request, deadline, connected, &response));
    if (last.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) reason = last;
    if (last.ok()) {
      // A leader of another version (an older one does not check).
      RETURN_IF_ERROR(checkProtocol(options_.job_id, options_.protocol, "this node (" + options_.self_address + ")",
                                    ProtocolRange::of(response), leader));
      return response;
    }
    if (connected && last.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return unavailable("job '" + options_.job_id + "': lost " + leader +
                         " while the job was forming: " + last.error_message());
    }
    // The leader may not know the job yet (its ranks register later): retry.
    if (last.error_code() != grpc::StatusCode::UNAVAILABLE && last.error_code() != grpc::StatusCode::NOT_FOUND) break;
    if (last.error_code() == grpc::StatusCode::NOT_FOUND) waitForTheLeadersJob(&told_waiting);
  }
  // The last call may have run into the join deadline: the one before it
  // says why (a refused connection, a TLS handshake the leader rejected).
  const grpc::Status& why = reason.ok() ? last : reason;
  return unavailable("job '" + options_.job_id + "': cannot join " + leader + ": " + why.error_message());
}

void LeaderJoin::waitForTheLeadersJob(bool* told) {
  if (!*told) {
    GS_LOG(control, info, "job '{}': the leader at {} does not hold the job yet; asking again until the join timeout",
           options_.job_id, options_.leader_address);
    *told = true;
  }
  MutexLock lock(mutex_);
  ended_cv_.wait_for(lock, std::chrono::milliseconds(100),
                     [&]() GS_REQUIRES(mutex_) { return stopped_ || !aborted_.empty(); });
}

}  // namespace gradsync::peer
