// SPDX-License-Identifier: Apache-2.0
// The executor side of Job: the thread that runs ready collectives, and the
// RankAccess it gives the local executor.
#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/fusion/fusion_planner.h"
#include "daemon/server/job.h"

namespace gradsync::server {

void Job::executorLoop() {
  if (cross_ && limits_.steady_state_rounds && !spec_.elastic) steadyExecutorLoop();
  for (;;) {
    std::optional<BatchQueue::Batch> next;
    {
      MutexLock lock(mutex_);
      next = nextBatchLocked(lock);
    }
    if (!next) return;
    if (next->lead) {
      Status sent = cross_->broadcast(next->responses, next->sequence, batch_epoch_, batch_fusion_threshold_);
      if (!sent.isOk()) {
        for (auto& r : next->responses) r.status = sent;  // fails them on this node; the job fails below
        failJob(sent.message(), /*node_lost=*/true);
      }
    }
    runBatch(std::move(next->responses), next->sequence);
    MutexLock lock(mutex_);
    queue_.finished();
  }
}

std::optional<BatchQueue::Batch> Job::nextBatchLocked(MutexLock& lock) {
  ready_cv_.wait(lock, [&]() GS_REQUIRES(mutex_) { return stopping_ || queue_.runnable(); });
  if (stopping_) return std::nullopt;
  const autotune::Settings tuned = tuning_.current();
  if (!queue_.hasRemote() && negotiator_.pendingCount() > 0 && tuned.cycle_time.count() > 0) {
    // The leader of a multi-node job (or one daemon, when autotune says
    // so): more tensors are on their way; give them one cycle to join this
    // batch.
    const auto until = Clock::now() + tuned.cycle_time;
    ready_cv_.wait_until(lock, until, [&]() GS_REQUIRES(mutex_) {
      return stopping_ || negotiator_.pendingCount() == 0 || queue_.bytesReady() >= tuned.fusion_threshold_bytes;
    });
    if (stopping_) return std::nullopt;
  }
  BatchQueue::Batch next = queue_.next(/*lead=*/cross_ != nullptr);
  beginBatchLocked(next.fusion_threshold_bytes);
  if (next.lead) markAdmissionLocked(&next.responses);
  return next;
}

void Job::beginBatchLocked(uint64_t fusion_threshold_bytes) {
  tuning_.followLeader(fusion_threshold_bytes);  // (0: none came with the batch)
  batch_fusion_threshold_ =
      fusion_threshold_bytes != 0 ? fusion_threshold_bytes : tuning_.current().fusion_threshold_bytes;
  batch_sessions_ = ranks_.byRank();
  batch_epoch_ = epochs_.current();
  if (cross_) batch_local_ranks_ = ranks_.registered();  // one node: every rank is local
}

void Job::runBatch(std::vector<coordinator::Response> batch, uint64_t sequence) {
  if (data_plane_) data_plane_->beginBatch(sequence, batch_epoch_);
  for (const auto& fused : fusion::planFusion(std::move(batch), batch_fusion_threshold_)) {
    const auto started = Clock::now();
    timeline_.executionBegins(fused);
    auto results = executor_.run(fused, *this);
    timeline_.executionEnds(fused, results);
    GS_LOG(executor, debug, "job '{}': fused response '{}' of {} collectives (ring tags {}), {} bytes, in {} us",
           spec_.job_id, fused.responses.front().name, fused.responses.size(), data_plane_ ? data_plane_->lastTag() : 0,
           fused.bytes, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
    Outbox outbox;
    {
      MutexLock lock(mutex_);
      const bool decides = decidesTuningLocked();
      const auto done = Clock::now();  // one time for the fused batch
      for (size_t i = 0; i < fused.responses.size(); ++i) {
        complete(fused.responses[i], results[i], started, &outbox);
        if (decides && results[i].status.isOk()) {
          tellTuningLocked(tuning_.completed(fused.responses[i].name, fused.responses[i].first().length, done),
                           &outbox);
        }
      }
      ++fused_responses_;
      stats_.fused(fused.bytes);
      queue_.completed(fused.responses.size());
    }
    flush(&outbox);
  }
  batch_sessions_.clear();
}

void Job::tellTuningLocked(const std::vector<autotune::TuningEvent>& events, Outbox* outbox) {
  for (const auto& event : events) {
    v1::DaemonMessage message;
    v1::AutotuneSample* sample = message.mutable_autotune_sample();
    sample->set_fusion_threshold_bytes(event.settings.fusion_threshold_bytes);
    sample->set_cycle_time_ms(static_cast<double>(event.settings.cycle_time.count()) / 1000.0);
    sample->set_bytes_per_second(event.bytes_per_second);
    sample->set_phase(event.phase);
    for (const auto& [rank, session] : ranks_.byRank()) {
      if (session->identity().autotune_log) outbox->emplace_back(session, message);
    }
  }
}

void Job::complete(const coordinator::Response& response, const executor::ResponseResult& result,
                   Clock::time_point started, Outbox* outbox) {
  const auto now = Clock::now();
  const bool admit = admitsJoinersLocked(response, result);
  if (result.status.isOk()) {
    ++operations_done_;
    if (spec_.elastic && isCommitBarrier(response)) epochs_.countCommit();
  } else {
    countErrorLocked(result.status.code());
    last_error_ = result.status.message();
  }
  for (size_t i = 0; i < response.requests.size(); ++i) {
    const auto& request = response.requests[i];
    if (!request) continue;
    // The batch's own sessions: an elastic epoch change may have renumbered
    // the job's since (a lost rank's session still takes its Done quietly).
    auto it = batch_sessions_.find(request->rank);
    if (it == batch_sessions_.end()) continue;
    it->second->removeHandle(request->handle);
    forwarded_.erase(std::make_pair(request->rank, request->handle));
    v1::DaemonMessage message = doneFor(response, result, i, admit);
    if (result.status.isOk()) {
      bytes_done_ += request->length;
      const DataType dtype = isDataless(response.type) ? v1::DATA_TYPE_UNSPECIFIED : request->dtype;
      stats_.done(response.type, dtype, request->length, request->received, started, now);
    }
    outbox->emplace_back(it->second, std::move(message));
  }
  if (result.status.isOk()) epochs_.succeeded(batch_epoch_, now);
  if (admit) admitAtCommitLocked(response.name, outbox);
}

v1::DaemonMessage Job::doneFor(const coordinator::Response& response, const executor::ResponseResult& result, size_t i,
                               bool admit) const {
  const coordinator::Request& request = *response.requests[i];
  // A failure in an epoch that has ended (or is ending: a rank of it was
  // lost) is the membership change's doing: retriable.
  v1::DaemonMessage message =
      doneMessage(spec_.job_id, request, result.status,
                  !result.status.isOk() && (batch_epoch_ != epochs_.current() || epochs_.ending()));
  v1::Done* done = message.mutable_done();
  if (!result.status.isOk()) {
    done->mutable_detail()->set_tensor_name(response.name);
    for (int rank : response.ranks) done->mutable_detail()->add_ranks(rank);
  }
  if (i < result.members.size()) {
    for (int64_t d : result.members[i].output_shape) done->add_output_shape(d);
    for (int64_t s : result.members[i].received_splits) done->add_received_splits(s);
  }
  done->set_last_joined_rank(response.last_joined_rank);
  if (response.type == v1::PROCESS_SET_ADD) done->set_process_set_id(response.changed_process_set);
  done->set_epoch_changed(admit);
  return message;
}

void Job::admitAtCommitLocked(const std::string& commit, Outbox* outbox) {
  if (cross_) {
    // The followers hear of it from the leader.
    if (cross_->isLeader()) admitAcrossLocked("at the commit '" + commit + "'", outbox);
    return;
  }
  changeEpochLocked(
      "admitted " + std::to_string(ranks_.readyJoinerCount()) + " new ranks at the commit '" + commit + "'", outbox,
      /*admit=*/true);  // admits the same joiners: both under mutex_
}

executor::DataPlane& Job::dataPlane() {
  if (data_plane_) return *data_plane_;
  return single_node_;
}

const executor::DataPlane& Job::dataPlane() const {
  if (data_plane_) return *data_plane_;
  return single_node_;
}

void Job::phase(const char* name, bool begin) {
  stats_.phase(name, begin, Clock::now());
  timeline_.phase(name, begin);
}

const handoff::ShmArena* Job::arena(int rank) {
  auto it = batch_sessions_.find(rank);
  return it == batch_sessions_.end() ? nullptr : it->second->arena();
}

std::shared_ptr<gpu::ClientGpu> Job::gpuOf(int rank) {
  auto it = batch_sessions_.find(rank);
  return it == batch_sessions_.end() ? nullptr : it->second->gpu();
}

StatusOr<std::vector<uint8_t*>> Job::requestOutputs(const coordinator::Response& response,
                                                    const std::vector<uint64_t>& bytes,
                                                    const std::vector<std::vector<int64_t>>& shapes) {
  const std::string prefix = "job '" + spec_.job_id + "' tensor '" + response.name + "': ";
  executor::PhaseScope phase(*this, "WAIT_FOR_OUTPUT_GRANTS");
  // In a multi-node job a rank that left elsewhere does not stop a
  // collective already negotiated (the other nodes may have finished it):
  // only a lost local rank (it will never grant) or a stop ends the wait.
  const bool abort_on_failure = cross_ == nullptr;
  ASSIGN_OR_RETURN(const std::vector<OutputGrants::Key> keys,
                   sendOutputRequests(response, bytes, shapes, prefix, abort_on_failure));
  MutexLock lock(mutex_);
  ASSIGN_OR_RETURN(const std::vector<v1::OutputGrant> answers, awaitGrantsLocked(lock, keys, prefix, abort_on_failure));
  std::vector<uint8_t*> pointers(response.requests.size(), nullptr);
  for (size_t i = 0, k = 0; i < response.requests.size(); ++i) {
    if (!response.requests[i] || !isLocal(response.requests[i]->rank)) continue;
    const Session& session = *batch_sessions_.at(response.requests[i]->rank);
    auto pointer = OutputGrants::pointer(session.describe(), session.arena(), answers[k++], bytes[i]);
    if (!pointer.isOk()) return Status(pointer.status().code(), prefix + pointer.status().message());
    pointers[i] = *pointer;
  }
  return pointers;
}

StatusOr<std::vector<OutputGrants::Key>> Job::sendOutputRequests(const coordinator::Response& response,
                                                                 const std::vector<uint64_t>& bytes,
                                                                 const std::vector<std::vector<int64_t>>& shapes,
                                                                 const std::string& prefix, bool abort_on_failure) {
  std::vector<OutputGrants::Key> keys;
  Outbox outbox;
  {
    MutexLock lock(mutex_);
    if (abort_on_failure && !failure_.empty()) return aborted(prefix + failure_);
    for (size_t i = 0; i < response.requests.size(); ++i) {
      const auto& request = response.requests[i];
      if (!request || !isLocal(request->rank)) continue;  // other nodes grant their own
      auto session = batch_sessions_.find(request->rank);
      if (session == batch_sessions_.end()) {
        (void)outputs_.endWait(keys);  // forgets those asked for already
        return aborted(prefix + "rank " + std::to_string(request->rank) + " left");
      }
      keys.emplace_back(request->rank, request->handle);
      outputs_.expect(keys.back());
      v1::DaemonMessage message;
      message.mutable_output_request()->set_handle(request->handle);
      message.mutable_output_request()->set_length(bytes[i]);
      for (int64_t d : shapes[i]) message.mutable_output_request()->add_shape(d);
      outbox.emplace_back(session->second, std::move(message));
    }
    // Shown (gradsyncctl tensors) from before any rank can see a request.
    outputs_.beginWait(response.name, keys, Clock::now());
  }
  flush(&outbox);
  return keys;
}

StatusOr<std::vector<v1::OutputGrant>> Job::awaitGrantsLocked(MutexLock& lock,
                                                              const std::vector<OutputGrants::Key>& keys,
                                                              const std::string& prefix, bool abort_on_failure) {
  const uint64_t epoch = epochs_.current();
  const Session* lost = nullptr;
  const bool granted = grant_cv_.wait_for(lock, limits_.output_grant_timeout, [&]() GS_REQUIRES(mutex_) {
    if (outputs_.allGranted(keys)) return true;
    lost = lostGrantRankLocked(keys);
    return lost != nullptr || (abort_on_failure && !failure_.empty()) || stopping_ || epochs_.current() != epoch;
  });
  OutputGrants::Outcome outcome = outputs_.endWait(keys);
  if (abort_on_failure && !failure_.empty()) return aborted(prefix + failure_);
  if (stopping_) return unavailable(prefix + "job stopping");
  if (epochs_.current() != epoch) {
    return aborted(prefix + "the elastic job moved to epoch " + std::to_string(epochs_.current()));
  }
  if (lost != nullptr) {  // failure_ names the cause when it is that rank's loss
    const std::string& who = lost->describe();
    const std::string cause = failure_.compare(0, who.size(), who) == 0 ? failure_ : who + " left the job";
    return aborted(prefix + cause + " before answering the output request");
  }
  if (!granted || outcome.answers.size() != keys.size()) {
    return deadlineExceeded(
        prefix + "ranks " + coordinator::ranksString(outcome.waiting) + " did not answer the output request within " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limits_.output_grant_timeout).count()) + " s");
  }
  return std::move(outcome.answers);
}

const Session* Job::lostGrantRankLocked(const std::vector<OutputGrants::Key>& keys) const {
  for (const auto& key : keys) {
    auto snapshot = batch_sessions_.find(key.first);
    if (snapshot == batch_sessions_.end()) continue;  // refused before the wait
    if (ranks_.find(key.first) != snapshot->second) return snapshot->second.get();
  }
  return nullptr;
}

}  // namespace gradsync::server
