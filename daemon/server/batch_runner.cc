// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/batch_runner.h"

#include "daemon/common/logging.h"

namespace gradsync::server {

namespace {
// The first failure of this node's own part among `results` (null: none):
// a response that failed here, not through the leader's negotiation, and
// not for a reason every node reaches alike from the batch (a collective
// or path not implemented, a precondition of the job's).
const Status* localFailure(const fusion::FusedResponse& fused, const std::vector<executor::ResponseResult>& results) {
  for (size_t i = 0; i < results.size() && i < fused.responses.size(); ++i) {
    const Status& status = results[i].status;
    if (status.isOk() || !fused.responses[i].status.isOk()) continue;
    if (status.code() == StatusCode::kUnimplemented || status.code() == StatusCode::kFailedPrecondition) continue;
    return &status;
  }
  return nullptr;
}
}  // namespace

void BatchRunner::run(const BatchContext& context, std::vector<coordinator::Response> batch, uint64_t sequence) {
  context_ = &context;
  if (parts_.peer_plane) parts_.peer_plane->beginBatch(sequence, context.epoch);
  uint32_t index = 0;
  for (const auto& fused : fusion::planFusion(std::move(batch), context.fusion_threshold_bytes)) {
    const auto started = Clock::now();
    // Every daemon plans the same fused responses from the same batch: the
    // index names this one's transfers wherever it skips or fails.
    if (parts_.peer_plane) parts_.peer_plane->beginResponse(index);
    ++index;
    parts_.timeline->executionBegins(fused);
    auto results = parts_.executor->run(fused, *this);
    // A failure of this node's part with none among the daemons: it may
    // have left its peers waiting in the response's steps; they are told.
    if (parts_.peer_plane && !parts_.peer_plane->stepFailedInResponse()) {
      if (const Status* local = localFailure(fused, results)) parts_.peer_plane->abandonResponse(*local);
    }
    parts_.timeline->executionEnds(fused, results);
    GS_LOG(executor, debug,
           "job '{}': batch {} fused response {} '{}' of {} collectives ({} data-plane calls), {} bytes, in {} us",
           parts_.job_id, sequence, index - 1, fused.responses.front().name, fused.responses.size(),
           parts_.peer_plane ? parts_.peer_plane->callsInResponse() : 0, fused.bytes,
           std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
    completed_(fused, results, started);
  }
  context_ = nullptr;
}

void BatchRunner::phase(const char* name, bool begin) {
  parts_.stats->phase(name, begin, Clock::now());
  parts_.timeline->phase(name, begin);
}

bool BatchRunner::timelineOn() const { return parts_.timeline->recording(); }

void BatchRunner::gpuPhase(const char* name, std::chrono::steady_clock::time_point start,
                           std::chrono::steady_clock::time_point end) {
  parts_.timeline->gpuSpan(name, start, end);
}

const handoff::ShmArena* BatchRunner::arena(int rank) {
  auto it = context_->sessions.find(rank);
  return it == context_->sessions.end() ? nullptr : it->second->arena();
}

std::shared_ptr<gpu::ClientGpu> BatchRunner::gpuOf(int rank) {
  auto it = context_->sessions.find(rank);
  return it == context_->sessions.end() ? nullptr : it->second->gpu();
}

bool BatchRunner::isLocal(int rank) const {
  if (!context_->local_ranks) return true;
  const std::set<int>& local = *context_->local_ranks;
  // A node's ranks are mostly one span: the executors ask this of every
  // rank of every response, so other nodes' ranks are told apart first.
  if (local.empty() || rank < *local.begin() || rank > *local.rbegin()) return false;
  return local.count(rank) > 0;
}

StatusOr<std::vector<uint8_t*>> BatchRunner::requestOutputs(const coordinator::Response& response,
                                                            const std::vector<uint64_t>& bytes,
                                                            const std::vector<std::vector<int64_t>>& shapes) {
  const std::string prefix = "job '" + parts_.job_id + "' tensor '" + response.name + "': ";
  executor::PhaseScope phase(*this, "WAIT_FOR_OUTPUT_GRANTS");
  ASSIGN_OR_RETURN(const std::vector<OutputGrants::Ask> asks, askForOutputs(response, bytes, shapes, prefix));
  ASSIGN_OR_RETURN(const std::vector<v1::OutputGrant> answers,
                   parts_.grants->await(asks, context_->epoch, endsAtFailure(), parts_.grant_timeout, prefix));
  std::vector<uint8_t*> pointers(response.requests.size(), nullptr);
  for (size_t i = 0, k = 0; i < response.requests.size(); ++i) {
    if (!response.requests[i] || !isLocal(response.requests[i]->rank)) continue;
    const Session& session = *context_->sessions.at(response.requests[i]->rank);
    auto pointer = OutputGrants::pointer(session.describe(), session.arena(), answers[k++], bytes[i]);
    if (!pointer.isOk()) return Status(pointer.status().code(), prefix + pointer.status().message());
    pointers[i] = *pointer;
  }
  return pointers;
}

StatusOr<std::vector<OutputGrants::Ask>> BatchRunner::askForOutputs(const coordinator::Response& response,
                                                                    const std::vector<uint64_t>& bytes,
                                                                    const std::vector<std::vector<int64_t>>& shapes,
                                                                    const std::string& prefix) {
  std::vector<OutputGrants::Ask> asks;
  std::vector<std::pair<std::shared_ptr<Session>, v1::DaemonMessage>> requests;
  for (size_t i = 0; i < response.requests.size(); ++i) {
    const auto& request = response.requests[i];
    if (!request || !isLocal(request->rank)) continue;  // other nodes grant their own
    auto session = context_->sessions.find(request->rank);
    if (session == context_->sessions.end()) return aborted(prefix + "rank " + std::to_string(request->rank) + " left");
    asks.push_back({request->rank, request->handle, session->second->id()});
    v1::DaemonMessage message;
    message.mutable_output_request()->set_handle(request->handle);
    message.mutable_output_request()->set_length(bytes[i]);
    for (int64_t d : shapes[i]) message.mutable_output_request()->add_shape(d);
    requests.emplace_back(session->second, std::move(message));
  }
  // Shown (gradsyncctl tensors) from before any rank can see a request.
  Status asked = parts_.grants->begin(response.name, asks, context_->epoch, endsAtFailure(), Clock::now());
  if (!asked.isOk()) return Status(asked.code(), prefix + asked.message());
  for (const auto& [session, message] : requests) session->send(message);
  return asks;
}

}  // namespace gradsync::server
