// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_submission.h"

#include <algorithm>

#include "daemon/server/done_messages.h"
#include "daemon/server/enqueue_validation.h"
#include "daemon/server/job_elastic.h"
#include "daemon/server/job_execution.h"
#include "daemon/server/job_place.h"

namespace gradsync::server {
namespace {

// Collectives that never wait for output grants may run on a session's
// reader thread (a grant arrives on a reader thread: waiting there could
// deadlock).
bool runsInline(const coordinator::Response& r) {
  return !r.status.isOk() || r.type == v1::ALLREDUCE || r.type == v1::BROADCAST || isDataless(r.type);
}

// Larger batches go to the executor thread: reducing them on a reader
// thread would hold up that rank's next enqueues (measured: ResNet-50 step
// 17.8 -> 27.4 ms when everything ran inline).
constexpr uint64_t kInlineBytes = 256 << 10;

}  // namespace

void Job::Submission::submit(const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue) {
  const std::shared_ptr<gpu::ClientGpu> gpu = enqueue.has_cuda() ? session->gpu() : nullptr;
  EnqueueContext context = enqueueContext(session->rank(), session->arena());
  context.gpu = gpu.get();
  auto request = validateEnqueue(enqueue, context);

  RankMessages to_ranks;
  std::vector<coordinator::Response> inline_batch;
  {
    MutexLock lock(job_.mutex_);
    coordinator::Request minimal;
    minimal.rank = session->rank();
    minimal.handle = enqueue.handle();
    minimal.name = enqueue.name();
    if (!request.isOk()) {
      job_.failRequestLocked(
          minimal, Status(request.status().code(), "job '" + job_.spec_.job_id + "' " + request.status().message()),
          &to_ranks);
    } else if (session->handlesInFlight() >= job_.limits_.max_inflight_per_rank) {
      job_.stats_.failed(StatusCode::kResourceExhausted);
      to_ranks.emplace_back(session, doneMessage(job_.spec_.job_id, minimal,
                                                 resourceExhausted(session->describe() + " has " +
                                                                   std::to_string(session->handlesInFlight()) +
                                                                   " operations in flight, the most allowed "
                                                                   "(max_inflight_per_rank): wait for some first")));
    } else if (!session->addHandle(enqueue.handle())) {
      // Not failRequestLocked: that would end the original operation too.
      job_.stats_.failed(StatusCode::kInvalidArgument);
      to_ranks.emplace_back(session, doneMessage(job_.spec_.job_id, minimal,
                                                 invalidArgument("handle " + std::to_string(enqueue.handle()) +
                                                                 " is already in flight")));
    } else if (!job_.failure_.empty() || job_.stopping_) {
      job_.failRequestLocked(
          *request,
          aborted("job '" + job_.spec_.job_id + "': " + (job_.failure_.empty() ? job_.stop_reason_ : job_.failure_)),
          &to_ranks);
    } else if (!job_.elastic_->refuseStaleEpochLocked(job_, session, enqueue, &to_ranks)) {
      request->rank = session->rank();  // renumbered under this lock
      request->received = Clock::now();
      submitLocked(job_, session, std::move(request).value(), &to_ranks, &inline_batch);
    }
  }
  flush(&to_ranks);
  if (!inline_batch.empty()) {
    job_.execution_->runBatch(std::move(inline_batch), 0);
    MutexLock lock(job_.mutex_);
    job_.queue_.finished();
    if (!job_.queue_.ready().empty()) job_.execution_->wake();
  }
}

EnqueueContext Job::Submission::enqueueContext(int rank, const handoff::ShmArena* arena, bool remote) const {
  EnqueueContext context;
  context.rank = rank;
  context.job_size = job_.negotiation_.size();
  context.process_sets = job_.negotiation_.processSets();
  context.max_name_length = job_.limits_.max_name_length;
  context.arena = arena;
  context.remote = remote;
  context.gpus_present = job_.limits_.gpus != nullptr;
  context.no_gpu_reason = job_.limits_.no_gpu_reason;
  return context;
}

void Job::Submission::submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                                   RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch,
                                   bool steady) {
  // Replayed once the node's role is known.
  if (job.cross_ && job.awaiting_.holdUntilStarted(session, request)) return;
  if (steady && holdForRoundsLocked(job, session, request)) return;
  if (steady && job.rounds_ && request.group_id != 0) {
    // A member that is not held goes to the leader: so do the members of
    // its group held so far (the leader negotiates a group whole; they
    // would wait there for them until the hold limit).
    for (auto& held : job.rounds_->takeGroup(request.group_id)) {
      submitLocked(job, held.session, std::move(held.request), to_ranks, inline_batch, /*steady=*/false);
    }
  }
  job.place().submitLocked(job, session, std::move(request), to_ranks, inline_batch);
}

bool Job::Submission::holdForRoundsLocked(Job& job, const std::shared_ptr<Session>& session,
                                          coordinator::Request& request) {
  if (!job.rounds_ || !session) return false;
  const auto is_local = [&job](int rank) GS_REQUIRES(job.mutex_) { return job.ranks_.registeredHere(rank); };
  switch (job.rounds_->hold(session, request, is_local)) {
    case SteadyRounds::Hold::kNot:
      return false;
    case SteadyRounds::Hold::kReady:
      job.execution_->wake();
      return true;
    case SteadyRounds::Hold::kHeld:
      return true;
  }
  return false;
}

void Job::Submission::negotiateLocked(Job& job, coordinator::Request request, RankMessages* to_ranks,
                                      std::vector<coordinator::Response>* inline_batch) {
  coordinator::Request minimal;
  minimal.rank = request.rank;
  minimal.handle = request.handle;
  minimal.name = request.name;
  const auto type = request.type;
  job.timeline_.requestArrived(request);
  auto ready = job.negotiation_.submit(std::move(request), Clock::now());
  if (!ready.isOk()) {
    job.timeline_.negotiated(minimal.name, type);
    job.failRequestLocked(minimal, ready.status(), to_ranks);
    return;
  }
  readyLocked(job, std::move(ready).value(), inline_batch);
}

void Job::Submission::readyLocked(Job& job, std::vector<coordinator::Response> ready,
                                  std::vector<coordinator::Response>* inline_batch) {
  for (const auto& r : ready) job.timeline_.negotiated(r.name, r.type);
  if (ready.empty()) return;
  job.negotiation_.publish(ready, /*from_leader=*/false);
  job.queue_.addReady(std::move(ready));
  // (Unless an autotuned cycle time has them wait for more.)
  const bool waits = job.tuning_.current().cycle_time.count() > 0 && job.negotiation_.pendingCount() > 0;
  if (job.place().runsInline() && !job.queue_.executing() && !waits &&
      std::all_of(job.queue_.ready().begin(), job.queue_.ready().end(), runsInline) &&
      job.queue_.bytesReady() <= kInlineBytes) {
    *inline_batch = std::move(job.queue_.next(/*lead=*/false).responses);
    job.execution_->beginBatchLocked(job);
  } else {
    job.execution_->wake();
  }
}

}  // namespace gradsync::server
