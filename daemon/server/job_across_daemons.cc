// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_across_daemons.h"

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/coordinator/request_wire.h"
#include "daemon/server/enqueue_validation.h"
#include "daemon/server/job_elastic.h"
#include "daemon/server/job_execution.h"
#include "daemon/server/job_submission.h"

namespace gradsync::server {

std::unique_ptr<peer::CrossNode> Job::AcrossDaemons::makeNode() {
  const JobSpec& spec = job_.spec_;
  const JobLimits& limits = job_.limits_;
  peer::CrossNodeOptions options{spec.job_id,
                                 spec.token,
                                 spec.size,
                                 spec.process_sets,
                                 limits.peer_address,
                                 spec.leader_address,
                                 limits.hostname,
                                 limits.join_timeout,
                                 limits.peer_credentials,
                                 limits.response_cache_capacity,
                                 limits.gpus ? limits.gpus->count() : 0,
                                 limits.gpus != nullptr && limits.nccl != nullptr && limits.nccl_between_daemons,
                                 nullptr,
                                 limits.data_plane};
  if (limits.nccl) options.make_nccl_id = [nccl = limits.nccl] { return nccl->uniqueId(); };
  options.elastic = spec.elastic;
  options.failover = spec.elastic && limits.leader_failover;
  options.min_size = spec.min_size;
  options.topology = limits.topology;
  options.membership_part_bytes = limits.membership_part_bytes;
  options.steady_state_rounds = limits.steady_state_rounds && !spec.elastic;
  options.link_cost = limits.link_cost;
  options.leader_rounds = limits.leader_rounds && !spec.elastic;
  peer::CrossNode::Hooks hooks;
  hooks.on_batch = [this](std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
                          uint64_t fusion_threshold_bytes) {
    onRemoteBatch(std::move(batch), sequence, epoch, fusion_threshold_bytes);
  };
  if (spec.elastic) {
    hooks.on_ranks_lost = [this](const std::vector<int>& ranks, uint64_t epoch, const std::string& cause) {
      job_.elastic_->ranksLost(ranks, epoch, cause);
    };
    hooks.on_new_epoch = [this](const v1::NewEpoch& change) { job_.elastic_->newEpoch(change); };
  }
  hooks.on_remote_request = [this](int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
    submitRemote(rank, enqueue, epoch);
  };
  hooks.on_remote_repeats = [this](std::vector<coordinator::Repeat> repeats, uint64_t epoch) {
    submitRemoteRepeats(std::move(repeats), epoch);
  };
  hooks.on_failure = [this](const peer::CrossNode::Failure& failure) {
    // Told to the other nodes already: the job fails here and tells no one.
    job_.failJob(failure, /*detected_here=*/false);
  };
  return std::make_unique<peer::CrossNode>(std::move(options), std::move(hooks));
}

std::unique_ptr<SteadyRounds> Job::AcrossDaemons::makeRounds(peer::CrossNode& node) {
  SteadyRounds::Cache cache;
  cache.id = [&node](const coordinator::Request& request) { return node.cachedId(request); };
  cache.response = [&node](uint64_t id) { return node.cachedResponse(id); };
  return std::make_unique<SteadyRounds>(job_.spec_.job_id, job_.limits_.transfer_timeout, std::move(cache));
}

peer::PeerDataPlane* Job::AcrossDaemons::makeDataPlane(peer::CrossNode& node) {
  peer::PeerDataPlane::Hooks plane_hooks;
  plane_hooks.failed = [this](const Status& status) { return ringFailed(status); };
  plane_hooks.phase = [this](const char* name, bool begin) { job_.execution_->phase(name, begin); };
  plane_hooks.measured = [job_id = job_.spec_.job_id](size_t nodes, const collective::LinkCost& cost) {
    GS_LOG(executor, info,
           "job '{}': measured the links among {} daemons: latency {:.1f} us, {:.1f} us per message, {:.2f} GB/s; "
           "allreduces among them chosen by it",
           job_id, nodes, cost.latency_us, cost.message_us, 1e-3 / cost.byte_us);
  };
  plane_hooks.abandoned = [this](const Status& cause) { localPartFailed(cause); };
  data_plane_ =
      std::make_unique<peer::PeerDataPlane>(&node.endpoints(), job_.limits_.transfer_timeout, std::move(plane_hooks));
  return data_plane_.get();
}

std::optional<std::vector<v1::NodeInfo>> Job::AcrossDaemons::newMembers() {
  peer::CrossNode& node = *job_.cross_;
  if (!node.formed()) return std::nullopt;
  const uint64_t epoch = node.epoch();
  if (members_epoch_.exchange(epoch) == epoch) return std::nullopt;
  return node.members();
}

void Job::AcrossDaemons::describe(v1::JobInfo* info) const {
  job_.cross_->describe(info, Clock::now(), data_plane_->busySeconds());
  data_plane_->describe(info);
  if (job_.rounds_) job_.rounds_->describe(info);
}

void Job::AcrossDaemons::startIfComplete() {
  std::vector<int> ranks;
  std::vector<int64_t> pids;
  {
    MutexLock lock(job_.mutex_);
    // Claimed here: the last two ranks may register at the same moment.
    if (!job_.cross_ || !job_.formation_.claimStart(job_.ranks_.count())) return;
    for (const auto& [rank, session] : job_.ranks_.byRank()) {
      ranks.push_back(rank);
      pids.push_back(session->pid());
    }
  }
  job_.cross_->start(ranks, pids);
  RankMessages to_ranks;
  std::vector<coordinator::Response> unused;
  {
    MutexLock lock(job_.mutex_);
    for (auto& [session, request] : job_.awaiting_.start())
      job_.submission_->submitLocked(job_, session, std::move(request), &to_ranks, &unused);
  }
  flush(&to_ranks);
}

void Job::AcrossDaemons::submitRemote(int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
  // Its arena lives on the other node, which checked the range.
  auto request = validateEnqueue(enqueue, job_.submission_->enqueueContext(rank, nullptr, /*remote=*/true));
  RankMessages to_ranks;
  {
    MutexLock lock(job_.mutex_);
    admitRemoteLocked(rank, std::move(request), &enqueue, epoch, &to_ranks);
  }
  flush(&to_ranks);
}

void Job::AcrossDaemons::submitRemoteRepeats(std::vector<coordinator::Repeat> repeats, uint64_t epoch) {
  RankMessages to_ranks;
  {
    MutexLock lock(job_.mutex_);
    for (coordinator::Repeat& repeat : repeats) admitRepeatLocked(std::move(repeat), epoch, &to_ranks);
  }
  flush(&to_ranks);
}

bool Job::AcrossDaemons::isOtherNodesRankLocked(int rank) const {
  if (rank >= 0 && rank < job_.negotiation_.size() && !job_.ranks_.registeredHere(rank)) return true;
  GS_LOG(control, warn, "job '{}': a follower forwarded a request of rank {}, which it does not hold",
         job_.spec_.job_id, rank);
  return false;
}

void Job::AcrossDaemons::admitRemoteLocked(int rank, StatusOr<coordinator::Request> request, const v1::Enqueue* enqueue,
                                           uint64_t epoch, RankMessages* to_ranks) {
  // The CrossNode checked the epoch on arrival, but this job may have
  // moved to the next one since: the rank's number is of the old epoch,
  // and its follower fails the request when it applies the new one (it
  // would otherwise wait in the new epoch's negotiator, in another
  // rank's name or as a duplicate of the rank's retry).
  if (epoch != 0 && epoch != job_.epochs_.current()) return;
  if (!isOtherNodesRankLocked(rank)) return;
  std::vector<coordinator::Response> unused;  // (no inline batches across nodes)
  if (!request.isOk()) {
    coordinator::Request named;  // (only a checked enqueue fails here)
    named.rank = rank;
    job_.failRequestLocked(
        enqueue != nullptr ? coordinator::requestOf(rank, *enqueue) : named,
        Status(request.status().code(), "job '" + job_.spec_.job_id + "' " + request.status().message()), to_ranks);
  } else if (!job_.failure_.empty() || job_.stopping_) {
    job_.failRequestLocked(*request, aborted("job '" + job_.spec_.job_id + "': " + job_.failure_), to_ranks);
  } else {
    job_.submission_->submitLocked(job_, nullptr, std::move(request).value(), to_ranks, &unused);
  }
}

void Job::AcrossDaemons::admitRepeatLocked(coordinator::Repeat repeat, uint64_t epoch, RankMessages* to_ranks) {
  if (epoch != 0 && epoch != job_.epochs_.current()) return;  // (as in admitRemoteLocked)
  std::vector<int>& ranks = repeat.ranks;
  ranks.erase(std::remove_if(ranks.begin(), ranks.end(),
                             [&](int rank) GS_REQUIRES(job_.mutex_) { return !isOtherNodesRankLocked(rank); }),
              ranks.end());
  if (!job_.failure_.empty() || job_.stopping_) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      job_.failRequestLocked(repeat.request(i), aborted("job '" + job_.spec_.job_id + "': " + job_.failure_), to_ranks);
    }
    return;
  }
  if (ranks.empty()) return;
  for (int rank : ranks) job_.timeline_.requestArrived(repeat.cached->name, repeat.cached->type, rank);
  coordinator::Negotiator::Repeated submitted = job_.negotiation_.submit(repeat, Clock::now());
  for (const auto& [request, status] : submitted.refused) {
    job_.timeline_.negotiated(request.name, request.type);
    job_.failRequestLocked(request, status, to_ranks);
  }
  std::vector<coordinator::Response> unused;  // (no inline batches across nodes)
  job_.submission_->readyLocked(job_, std::move(submitted.ready), &unused);
}

void Job::AcrossDaemons::onRemoteBatch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
                                       uint64_t fusion_threshold_bytes) {
  MutexLock lock(job_.mutex_);
  if (job_.stopping_) return;  // negotiated work still runs after a rank left
  // Sent before the leader changed the epoch; its requests failed with the
  // change here (the leader, too, fails it).
  if (job_.spec_.elastic && epoch != job_.epochs_.current()) return;
  // Before any Done of the batch: a local rank told a new set's id may use
  // it at once, and its enqueue is checked here.
  job_.negotiation_.publish(batch, /*from_leader=*/true);
  job_.queue_.addRemote({std::move(batch), sequence, fusion_threshold_bytes});
  job_.execution_->wake();
}

namespace {
constexpr auto kRingCauseGrace = std::chrono::milliseconds(500);
}  // namespace

void Job::AcrossDaemons::localPartFailed(const Status& cause) {
  std::string failure;
  {
    MutexLock lock(job_.mutex_);
    if (job_.stopping_) return;
    if (job_.spec_.elastic) {
      // A rank gone starts a new epoch, which ends the peers' waits: give
      // it the time the leader may take to start it. Ranks that stay (the
      // failure was not theirs to leave over) start none, and the peers
      // would wait until their transfers' timeout.
      GS_LOG(executor, warn, "job '{}': this node's part failed on host {}: {}", job_.spec_.job_id,
             job_.limits_.hostname, cause.message());
      job_.state_cv_.wait_for(
          lock, std::chrono::milliseconds(peer::CrossNode::kSilenceLimitMs + 1000), [&]() GS_REQUIRES(job_.mutex_) {
            return job_.stopping_ || !job_.failure_.empty() || job_.epochs_.current() != job_.execution_->batchEpoch();
          });
      if (job_.stopping_ || job_.epochs_.current() != job_.execution_->batchEpoch()) return;
    }
    failure = job_.failure_;
  }
  // A job that failed already (a rank left: the peers still run what was
  // negotiated) keeps its cause, but the peers' waits in this response end
  // now: it cannot complete without this node's part.
  job_.failJob(failure.empty()
                   ? "the daemon on host " + job_.limits_.hostname + " could not take its part: " + cause.message()
                   : failure,
               /*node_lost=*/true);
}

Status Job::AcrossDaemons::ringFailed(const Status& status) {
  // The node that broke the ring usually says why through the peer service
  // at about the same moment (a rank of it died, it lost the leader): give
  // that message a moment to arrive. An elastic job's leader may take up to
  // the silence limit to start the next epoch; an election of a new leader
  // (failover), once under way, up to its voting limit.
  const auto settled = [&]() GS_REQUIRES(job_.mutex_) {
    return !job_.failure_.empty() || job_.stopping_ || job_.epochs_.current() != job_.execution_->batchEpoch();
  };
  const auto waitSettled = [&](std::chrono::milliseconds grace) GS_EXCLUDES(job_.mutex_) {
    MutexLock lock(job_.mutex_);
    return job_.state_cv_.wait_for(lock, grace, settled);
  };
  if (!waitSettled(job_.spec_.elastic ? std::chrono::milliseconds(peer::CrossNode::kSilenceLimitMs + 1000)
                                      : std::chrono::duration_cast<std::chrono::milliseconds>(kRingCauseGrace)) &&
      job_.spec_.elastic && job_.cross_->electing()) {
    (void)waitSettled(std::chrono::milliseconds(peer::CrossNode::kVotingLimitMs + 1000));
  }
  std::string cause;
  {
    MutexLock lock(job_.mutex_);
    if (job_.spec_.elastic && job_.failure_.empty() && !job_.stopping_ &&
        job_.epochs_.current() != job_.execution_->batchEpoch()) {
      return aborted("job '" + job_.spec_.job_id + "': the membership changed during the collective (epoch " +
                     std::to_string(job_.execution_->batchEpoch()) + " -> " + std::to_string(job_.epochs_.current()) +
                     "): " + job_.epochs_.lastCause());
    }
    cause = job_.failure_;
  }
  // The job's cause leads, for this call and for everything else of the
  // job that fails with it.
  const Status failed = cause.empty() || status.message().find(cause) != std::string::npos
                            ? status
                            : Status(status.code(), cause + " (then " + status.message() + ")");
  job_.failJob(failed.message(), /*node_lost=*/true);
  return failed;
}

}  // namespace gradsync::server
