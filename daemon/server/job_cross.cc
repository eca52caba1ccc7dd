// SPDX-License-Identifier: Apache-2.0
// Job, multi-node side: starting the node's role once every local rank has
// registered, requests forwarded from other nodes, the leader's batches, the
// ring, and failures reported by other nodes.
#include <algorithm>
#include <cstring>
#include <optional>

#include "daemon/collective/direct_allreduce.h"
#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/ring_movement.h"
#include "daemon/common/logging.h"
#include "daemon/coordinator/request_wire.h"
#include "daemon/server/enqueue_validation.h"
#include "daemon/server/job.h"

namespace gradsync::server {

void Job::startCrossNodeIfComplete() {
  std::vector<int> ranks;
  std::vector<int64_t> pids;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Claimed here: the last two ranks may register at the same moment.
    if (!cross_ || cross_starting_ || static_cast<int>(sessions_.size()) < spec_.local_size) return;
    cross_starting_ = true;
    for (const auto& [rank, session] : sessions_) {
      ranks.push_back(rank);
      pids.push_back(session->pid());
    }
  }
  cross_->start(ranks, pids);
  Outbox outbox;
  std::vector<coordinator::Response> unused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cross_started_ = true;
    auto early = std::move(early_);
    early_.clear();
    for (auto& [session, request] : early) submitToCoordinator(session, std::move(request), &outbox, &unused);
  }
  flush(&outbox);
}

void Job::submitRemote(int rank, const v1::Enqueue& enqueue) {
  // Its arena lives on the other node, which checked the range.
  auto request = validateEnqueue(enqueue, enqueueContext(rank, nullptr, /*remote=*/true));
  Outbox outbox;
  std::vector<coordinator::Response> unused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank < 0 || rank >= size_.load() || local_ranks_.count(rank)) {
      GS_LOG(control, warn, "job '{}': a follower forwarded a request of rank {}, which it does not hold", spec_.job_id,
             rank);
      return;
    }
    coordinator::Request minimal = coordinator::requestOf(rank, enqueue);
    if (!request.isOk()) {
      failRequestLocked(minimal,
                        Status(request.status().code(), "job '" + spec_.job_id + "' " + request.status().message()),
                        &outbox);
    } else if (!failure_.empty() || stopping_) {
      failRequestLocked(minimal, aborted("job '" + spec_.job_id + "': " + failure_), &outbox);
    } else {
      submitToCoordinator(nullptr, std::move(request).value(), &outbox, &unused);
    }
  }
  flush(&outbox);
}

void Job::onRemoteBatch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
                        uint64_t fusion_threshold_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return;  // negotiated work still runs after a rank left
  // Sent before the leader changed the epoch; its requests failed with the
  // change here (the leader, too, fails it).
  if (spec_.elastic && epoch != epoch_) return;
  // Before any Done of the batch: a local rank told a new set's id may use
  // it at once, and its enqueue is checked here.
  publishProcessSetsLocked(batch, /*from_leader=*/true);
  remote_batches_.push_back({sequence, fusion_threshold_bytes, std::move(batch)});
  wakeExecutorLocked();
}

void Job::failJob(const std::string& cause, bool node_lost) {
  Outbox outbox;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    if (!failure_.empty() && !node_lost) return;
    if (failure_.empty()) {
      failure_ = cause;
      GS_LOG(control, warn, "job '{}' failed: {}", spec_.job_id, cause);
    }
    // A lost node (or data plane) also ends what was negotiated: it cannot
    // run any more. A rank that left elsewhere only ends what waits for it.
    failAllLocked(aborted("job '" + spec_.job_id + "': " + cause), &outbox, /*keep_negotiated=*/!node_lost);
    if (spec_.elastic) refuseAllLocked(failure_, &outbox);
    wakeExecutorLocked();
  }
  grant_cv_.notify_all();
  if (cross_) {
    // Transfers with a lost node would otherwise wait for the transfer
    // timeout. The other nodes hear the cause before the local ranks do:
    // those may exit at once, closing this node's part of the ring.
    if (node_lost) cross_->abortTransfers(cause);
    cross_->announceFailure(cause, node_lost);
  }
  flush(&outbox);
}

namespace {
constexpr auto kRingCauseGrace = std::chrono::milliseconds(500);

// Adds the time until destruction to a nanosecond counter.
class BusyTimer {
 public:
  explicit BusyTimer(std::atomic<uint64_t>* total) : total_(total), start_(Clock::now()) {}
  ~BusyTimer() {
    total_->fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
  }

 private:
  std::atomic<uint64_t>* total_;
  Clock::time_point start_;
};
}  // namespace

Status Job::ringFailed(const Status& status) {
  std::string cause;
  {
    // The node that broke the ring usually says why through the peer
    // service at about the same moment (a rank of it died, it lost the
    // leader): give that message a moment to arrive. An elastic job's
    // leader may take up to the silence limit to start the next epoch.
    std::unique_lock<std::mutex> lock(mutex_);
    const auto grace = spec_.elastic ? std::chrono::milliseconds(peer::CrossNode::kSilenceLimitMs + 1000)
                                     : std::chrono::duration_cast<std::chrono::milliseconds>(kRingCauseGrace);
    grant_cv_.wait_for(lock, grace, [&] { return !failure_.empty() || stopping_ || epoch_ != batch_epoch_; });
    if (spec_.elastic && failure_.empty() && !stopping_ && epoch_ != batch_epoch_) {
      return aborted("job '" + spec_.job_id + "': the membership changed during the collective (epoch " +
                     std::to_string(batch_epoch_) + " -> " + std::to_string(epoch_) + "): " + history_.back().cause());
    }
    cause = failure_;
  }
  failJob(status.message(), /*node_lost=*/true);
  if (cause.empty() || status.message().find(cause) != std::string::npos) return status;
  return Status(status.code(), cause + " (then " + status.message() + ")");
}

namespace {
// Of a vector indexed by ring position among all nodes, the entries of
// `nodes`, in order: the same vector indexed by position among `nodes`.
template <typename T>
std::vector<T> amongNodes(const std::vector<T>& by_node, const executor::NodeSet& nodes) {
  std::vector<T> picked;
  for (int node : nodes) picked.push_back(node >= 0 && node < static_cast<int>(by_node.size()) ? by_node[node] : T());
  return picked;
}

// A reduce-scatter on one node: its contribution is the result.
void copyOwned(const void* input, void* data, DataType dtype,
               const std::vector<std::vector<collective::ElementRange>>& owned) {
  const size_t esize = elementSize(dtype);
  for (const auto& ranges : owned) {
    for (const auto& range : ranges) {
      std::memcpy(static_cast<uint8_t*>(data) + range.begin * esize,
                  static_cast<const uint8_t*>(input) + range.begin * esize, range.count * esize);
    }
  }
}
}  // namespace

Status Job::crossNodeAllreduce(const executor::NodeSet& nodes, void* data, size_t count, DataType dtype, ReduceOp op) {
  const auto deadline = Clock::now() + limits_.transfer_timeout;
  // Every daemon takes a sequence number for every call, taking part or
  // not, so that the numbers stay alike on all of them.
  const uint64_t sequence = ++ring_sequence_;
  if (nodes.size() < 2) return okStatus();  // one node: already reduced there
  // Small: one step, every daemon to every other (the ring takes 2(n-1)).
  const bool direct = count * elementSize(dtype) * (nodes.size() - 1) <= collective::kDirectAllreduceMaxBytes;
  std::optional<collective::MeshContext> mesh;
  std::optional<collective::RingContext> ring;
  if (direct) {
    ASSIGN_OR_RETURN(mesh, cross_->mesh(sequence, deadline, batch_epoch_, nodes));
    if (!mesh) return okStatus();  // not one of the nodes
  } else {
    ASSIGN_OR_RETURN(ring, cross_->ring(sequence, deadline, batch_epoch_, nodes));
    if (!ring) return okStatus();
  }
  BusyTimer busy(&ring_busy_ns_);
  executor::PhaseScope phase(*this, "CROSS_NODE_ALLREDUCE");
  Status status = direct ? collective::directAllreduce(*mesh, data, count, dtype, op, &ring_scratch_)
                         : collective::ringAllreduce(*ring, data, count, dtype, op, &ring_scratch_);
  return status.isOk() ? status : ringFailed(status);
}

Status Job::crossNodeReduceScatter(const executor::NodeSet& nodes, const void* input, void* data, DataType dtype,
                                   ReduceOp op, const std::vector<std::vector<collective::ElementRange>>& owned) {
  const uint64_t sequence = ++ring_sequence_;
  if (nodes.size() < 2) {  // one node: its contribution is the reduction
    if (input != data) copyOwned(input, data, dtype, owned);
    return okStatus();
  }
  ASSIGN_OR_RETURN(auto ring, cross_->ring(sequence, Clock::now() + limits_.transfer_timeout, batch_epoch_, nodes));
  if (!ring) return okStatus();
  BusyTimer busy(&ring_busy_ns_);
  executor::PhaseScope phase(*this, "CROSS_NODE_REDUCESCATTER");
  Status status =
      collective::ringReduceScatter(*ring, input, data, dtype, op, amongNodes(owned, nodes), &ring_scratch_);
  return status.isOk() ? status : ringFailed(status);
}

int Job::nodeOf(int rank) const {
  for (const auto& node : batch_members_) {
    for (int r : node.ranks()) {
      if (r == rank) return node.cross_rank();
    }
  }
  return 0;
}

int Job::nodeCount() const { return std::max<int>(1, static_cast<int>(batch_members_.size())); }

executor::RankAccess::NcclPeers Job::ncclPeers() const {
  NcclPeers peers;
  // Elastic jobs stage through host memory: the daemons' communicator would
  // have to shrink with every epoch (not built).
  if (!cross_ || spec_.elastic) return peers;
  const auto members = cross_->members();
  for (const auto& node : members) {
    // A node without GPU, or one that cannot join NCCL: every node stages
    // through host memory (all of them see the same membership).
    if (node.gpu_uuids_size() == 0 || !node.nccl()) return peers;
  }
  peers.id = cross_->ncclId();
  peers.rank = cross_->selfCrossRank();
  peers.nranks = static_cast<int>(members.size());
  return peers;
}

Status Job::crossNodeBroadcast(const executor::NodeSet& nodes, void* data, size_t bytes, int root_rank) {
  const uint64_t sequence = ++ring_sequence_;
  if (nodes.size() < 2) return okStatus();  // the root's node is the only one
  const auto root = std::find(nodes.begin(), nodes.end(), nodeOf(root_rank));
  if (root == nodes.end())
    return internalError("broadcast root rank " + std::to_string(root_rank) + " on no node of the set");
  ASSIGN_OR_RETURN(auto ring, cross_->ring(sequence, Clock::now() + limits_.transfer_timeout, batch_epoch_, nodes));
  if (!ring) return okStatus();
  BusyTimer busy(&ring_busy_ns_);
  executor::PhaseScope phase(*this, "CROSS_NODE_BROADCAST");
  Status status = collective::ringBroadcast(*ring, data, bytes, static_cast<int>(root - nodes.begin()));
  return status.isOk() ? status : ringFailed(status);
}

Status Job::crossNodeAllgather(const executor::NodeSet& nodes, uint8_t* buffer,
                               const std::vector<std::vector<collective::Range>>& owned) {
  const uint64_t sequence = ++ring_sequence_;
  if (nodes.size() < 2) return okStatus();  // every row is on this node
  ASSIGN_OR_RETURN(auto ring, cross_->ring(sequence, Clock::now() + limits_.transfer_timeout, batch_epoch_, nodes));
  if (!ring) return okStatus();
  BusyTimer busy(&ring_busy_ns_);
  executor::PhaseScope phase(*this, "CROSS_NODE_ALLGATHER");
  Status status = collective::ringAllgather(*ring, buffer, amongNodes(owned, nodes));
  return status.isOk() ? status : ringFailed(status);
}

Status Job::crossNodeAlltoall(const executor::NodeSet& nodes, const uint8_t* send,
                              const std::vector<collective::Range>& send_to, uint8_t* recv,
                              const std::vector<collective::Range>& recv_from) {
  const uint64_t sequence = ++ring_sequence_;
  if (nodes.size() < 2) return okStatus();  // nothing crosses nodes
  ASSIGN_OR_RETURN(auto mesh, cross_->mesh(sequence, Clock::now() + limits_.transfer_timeout, batch_epoch_, nodes));
  if (!mesh) return okStatus();
  BusyTimer busy(&ring_busy_ns_);
  executor::PhaseScope phase(*this, "CROSS_NODE_ALLTOALL");
  Status status =
      collective::pairwiseExchange(*mesh, send, amongNodes(send_to, nodes), recv, amongNodes(recv_from, nodes));
  return status.isOk() ? status : ringFailed(status);
}

}  // namespace gradsync::server
