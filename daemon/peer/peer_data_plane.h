// SPDX-License-Identifier: Apache-2.0
// The data plane of a job across daemons, as the executors use it: for each
// step among the nodes, the algorithm (for an allreduce the direct
// exchange, recursive doubling, Rabenseifner's halving and doubling or the
// ring, by size, node count and the cost of one message:
// collective/allreduce_choice.h; the pairwise exchange for alltoall), its
// tags, its scratch memory and busy time, over the endpoints NodeEndpoints
// (the job's CrossNode) gives.
//
// The cost of a message is measured (collective/link_probe.h) at the first
// allreduce among each set of nodes in an epoch, by those nodes, where the
// job measures its links (measuresLinks): every node of the set agrees on it
// before its first choice.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "daemon/collective/allreduce_choice.h"
#include "daemon/executor/data_plane.h"
#include "daemon/peer/node_endpoints.h"
#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::peer {

// Whether a job of these nodes measures its links (NodeInfo.link_cost): not
// if one says "fixed"; if one says "measured"; else (all "auto") if no two
// share a host name (daemons sharing a host time their CPUs, not a
// network). Every node decides alike from the same membership.
bool measuresLinks(const std::vector<v1::NodeInfo>& members);

class PeerDataPlane : public executor::DataPlane {
 public:
  struct Hooks {
    // A step failed with `status` (the node left the ring, a timeout):
    // returns the error to report, led by the job's cause when it has one.
    std::function<Status(const Status& status)> failed;
    // A phase of the collective begins or ends (the job's timeline).
    std::function<void(const char* name, bool begin)> phase;
    // The links among `nodes` nodes were measured (optional).
    std::function<void(size_t nodes, const collective::LinkCost& cost)> measured;
    // This node gave up its part of a response before or without its steps
    // among the daemons (`cause`, named by the response: a rank gone, a
    // buffer released): its peers must not wait for it (optional).
    std::function<void(const Status& cause)> abandoned;
  };
  // `endpoints` outlives this.
  PeerDataPlane(NodeEndpoints* endpoints, CrossClock::duration transfer_timeout, Hooks hooks);

  // Executor thread, before each batch: the batch runs in `epoch` (among
  // that epoch's nodes) as batch `sequence`. Drops what is left of the
  // batch before (its messages that matched no transfer here).
  void beginBatch(uint64_t sequence, uint64_t epoch);
  // Executor thread, before each fused response of the batch: the
  // transfers of its calls are told apart by (epoch, sequence, `index`, the
  // call's place in the response), what every daemon knows from the batch
  // alone, so a daemon that has no part in a response, or fails before its
  // calls, shifts nothing of the later ones.
  void beginResponse(uint32_t index);
  // The data-plane calls of the current response so far (for logs;
  // executor thread).
  uint32_t callsInResponse() const { return call_; }
  // Whether a step of the current response among the daemons failed
  // (theirs, or NCCL's: stepFailed), as opposed to this node's local
  // part of it (executor thread).
  bool stepFailedInResponse() const { return step_failed_; }
  // The current response failed on this node before or without its steps
  // among the daemons (`cause`): the others are told (hooks.abandoned), so
  // that none waits for this node's part (executor thread).
  void abandonResponse(const Status& cause);
  Status stepFailed(const Status& status) override;
  // Stray messages of finished batches dropped (any thread).
  uint64_t straysDropped() const { return strays_dropped_.load(std::memory_order_relaxed); }
  // Seconds spent in transfers among the daemons (any thread).
  double busySeconds() const { return static_cast<double>(busy_ns_.load()) / 1e9; }
  // Allreduces among the daemons so far by algorithm (direct, recursive
  // doubling, ring, halving-doubling: collective::AllreduceAlgorithm's
  // order; any thread).
  std::vector<uint64_t> allreducesByAlgorithm() const {
    std::vector<uint64_t> counts;
    for (const auto& count : allreduces_) counts.push_back(count.load());
    return counts;
  }
  // What it did, for JobInfo: transfers by algorithm, strays dropped and
  // the links' cost as last measured (any thread).
  void describe(v1::JobInfo* info) const;

  bool multiNode() const override { return true; }
  int nodeOf(int rank) const override;
  int nodeCount() const override;
  Status allreduce(const executor::NodeSet& nodes, void* data, size_t count, DataType dtype, ReduceOp op) override;
  Status broadcast(const executor::NodeSet& nodes, void* data, size_t bytes, int root_rank) override;
  Status allgather(const executor::NodeSet& nodes, uint8_t* buffer,
                   const std::vector<std::vector<collective::Range>>& owned) override;
  Status alltoall(const executor::NodeSet& nodes, const uint8_t* send, const std::vector<collective::Range>& send_to,
                  uint8_t* recv, const std::vector<collective::Range>& recv_from) override;
  Status reduceScatter(const executor::NodeSet& nodes, const void* input, void* data, DataType dtype, ReduceOp op,
                       const std::vector<std::vector<collective::ElementRange>>& owned) override;
  NcclPeers ncclPeers() const override;
  Status batchRuns() const override { return endpoints_->epochRuns(epoch_); }

 private:
  // Runs `step` (a Status()) as phase `phase`, timed; a failure, named
  // by the call's place (`id`), goes through hooks_.failed. A template: no
  // std::function per step.
  template <typename Step>
  Status run(const char* phase, const collective::TransferId& id, Step&& step) {
    const auto started = CrossClock::now();
    hooks_.phase(phase, true);
    Status status = step();
    hooks_.phase(phase, false);
    busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(CrossClock::now() - started).count());
    if (status.isOk()) return status;
    step_failed_ = true;
    return hooks_.failed(named(id, status));
  }
  // `result` (of finding call `id`'s endpoints): a failure is the step's,
  // told to the job as a failed step's is (so that the job's own cause, a
  // rank or node gone, leads what the ranks hear).
  template <typename T>
  StatusOr<T> noted(const collective::TransferId& id, StatusOr<T> result) {
    if (result.isOk()) return result;
    step_failed_ = true;
    return hooks_.failed(named(id, result.status()));
  }
  // The identity of the current response's next call (nextCall: and
  // counts it).
  collective::TransferId currentCall() const;
  collective::TransferId nextCall();
  // `status` led by where it happened (batch, response, call).
  static Status named(const collective::TransferId& id, const Status& status);
  CrossClock::time_point deadline() const { return CrossClock::now() + transfer_timeout_; }
  // The cost of a message among `nodes` (measured the first time in an
  // epoch, with the endpoints of collective `tag`); nullopt when this node
  // is not one of them.
  StatusOr<std::optional<collective::LinkCost>> linkCost(const collective::TransferId& id, CrossClock::time_point until,
                                                         const executor::NodeSet& nodes);

  NodeEndpoints* const endpoints_;
  const CrossClock::duration transfer_timeout_;
  const Hooks hooks_;
  // The executor thread's: the batch's epoch, sequence and nodes, the
  // current response and its calls so far, the scratch memory of the ring
  // and the direct exchange.
  uint64_t epoch_ = 0;
  uint64_t batch_ = 0;
  bool batch_begun_ = false;
  uint32_t response_ = 0;
  uint32_t call_ = 0;
  bool step_failed_ = false;  // in the current response
  std::vector<v1::NodeInfo> members_;
  uint64_t members_epoch_ = 0;
  std::vector<int> node_of_rank_;                                 // members_' cross rank of each rank
  bool measure_links_ = false;                                    // measuresLinks(members_)
  bool every_node_nccl_ = false;                                  // each of members_ has a GPU and NCCL
  std::map<executor::NodeSet, collective::LinkCost> link_costs_;  // of members_epoch_, by node set
  std::vector<uint8_t> scratch_;
  std::atomic<uint64_t> strays_dropped_{0};
  std::atomic<uint64_t> busy_ns_{0};
  std::atomic<uint64_t> allreduces_[collective::kAllreduceAlgorithms] = {};
  // The links' cost as last measured (0: not yet).
  std::atomic<double> link_latency_us_{0};
  std::atomic<double> link_message_us_{0};
  std::atomic<double> link_bytes_per_second_{0};
};

}  // namespace gradsync::peer
