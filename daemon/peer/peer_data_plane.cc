// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/peer_data_plane.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "daemon/collective/allreduce_choice.h"
#include "daemon/collective/direct_allreduce.h"
#include "daemon/collective/halving_doubling.h"
#include "daemon/collective/link_probe.h"
#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/recursive_doubling.h"
#include "daemon/collective/ring_allreduce.h"

namespace gradsync::peer {

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

bool measuresLinks(const std::vector<v1::NodeInfo>& members) {
  const auto says = [&](const char* mode) {
    return std::any_of(members.begin(), members.end(),
                       [&](const v1::NodeInfo& node) { return node.link_cost() == mode; });
  };
  if (says("fixed")) return false;
  if (says("measured")) return true;
  std::set<std::string> hosts;
  for (const auto& node : members) {
    if (!hosts.insert(node.hostname()).second) return false;
  }
  return members.size() >= 2;
}

PeerDataPlane::PeerDataPlane(NodeEndpoints* endpoints, CrossClock::duration transfer_timeout, Hooks hooks)
    : endpoints_(endpoints), transfer_timeout_(transfer_timeout), hooks_(std::move(hooks)) {}

void PeerDataPlane::beginBatch(uint64_t sequence, uint64_t epoch) {
  // The batch before is over here: what arrived of it and matched no
  // transfer (a collective this node failed before its part) is dropped,
  // not left for a later receive.
  if (batch_begun_) {
    const size_t dropped = endpoints_->dropBatchStrays(epoch_, batch_);
    if (dropped > 0) strays_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  }
  batch_begun_ = true;
  batch_ = sequence;
  epoch_ = epoch;
  response_ = 0;
  call_ = 0;
  step_failed_ = false;
  // The nodes of the batch's epoch (the job formed before any batch runs;
  // one of an epoch that is over fails at its ring).
  if (members_.empty() || members_epoch_ != epoch) {
    members_ = endpoints_->members(&members_epoch_);
    link_costs_.clear();
    measure_links_ = measuresLinks(members_);
    // A node without GPU, or one that cannot join NCCL: every node stages
    // through host memory (all of them see the same membership).
    every_node_nccl_ = std::all_of(members_.begin(), members_.end(),
                                   [](const v1::NodeInfo& node) { return node.gpus() > 0 && node.nccl(); });
    node_of_rank_.clear();
    for (const auto& node : members_) {
      for (int r : node.ranks()) {
        if (r < 0) continue;
        if (static_cast<size_t>(r) >= node_of_rank_.size()) node_of_rank_.resize(r + 1, 0);
        node_of_rank_[r] = node.cross_rank();
      }
    }
  }
}

void PeerDataPlane::beginResponse(uint32_t index) {
  response_ = index;
  call_ = 0;
  step_failed_ = false;
}

Status PeerDataPlane::stepFailed(const Status& status) {
  step_failed_ = true;
  return hooks_.failed(named(currentCall(), status));
}

void PeerDataPlane::abandonResponse(const Status& cause) {
  if (hooks_.abandoned) hooks_.abandoned(named(currentCall(), cause));
}

collective::TransferId PeerDataPlane::currentCall() const {
  collective::TransferId id;
  id.epoch = epoch_;
  id.batch = batch_;
  id.response = response_;
  id.call = call_;
  return id;
}

collective::TransferId PeerDataPlane::nextCall() {
  const collective::TransferId id = currentCall();
  ++call_;
  return id;
}

Status PeerDataPlane::named(const collective::TransferId& id, const Status& status) {
  return Status(status.code(), "batch " + std::to_string(id.batch) + " (epoch " + std::to_string(id.epoch) +
                                   "), fused response " + std::to_string(id.response) + ", call " +
                                   std::to_string(id.call) + ": " + status.message());
}

int PeerDataPlane::nodeOf(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < node_of_rank_.size() ? node_of_rank_[rank] : 0;
}

int PeerDataPlane::nodeCount() const { return std::max<int>(1, static_cast<int>(members_.size())); }

Status PeerDataPlane::allreduce(const executor::NodeSet& nodes, void* data, size_t count, DataType dtype, ReduceOp op) {
  const auto until = deadline();
  // Every daemon counts every call of the response, taking part or not;
  // the response's index keeps other responses apart whatever this one did.
  const collective::TransferId id = nextCall();
  // One node: already reduced there. Nothing to reduce (every node sees the
  // same count): no transfer, and no endpoint to connect.
  if (nodes.size() < 2 || count == 0) return okStatus();
  ASSIGN_OR_RETURN(const auto cost, noted(id, linkCost(id, until, nodes)));
  if (!cost) return okStatus();  // not one of the nodes
  const auto algorithm = collective::chooseAllreduce(count * elementSize(dtype), static_cast<int>(nodes.size()), *cost);
  allreduces_[static_cast<int>(algorithm)].fetch_add(1, std::memory_order_relaxed);
  if (algorithm != collective::AllreduceAlgorithm::kRing) {
    ASSIGN_OR_RETURN(auto mesh, noted(id, endpoints_->mesh(id, until, epoch_, nodes)));
    if (!mesh) return okStatus();  // not one of the nodes
    if (algorithm == collective::AllreduceAlgorithm::kDirect) {
      return run("CROSS_NODE_ALLREDUCE", id,
                 [&] { return collective::directAllreduce(*mesh, data, count, dtype, op, &scratch_); });
    }
    if (algorithm == collective::AllreduceAlgorithm::kHalvingDoubling) {
      return run("CROSS_NODE_ALLREDUCE", id,
                 [&] { return collective::halvingDoublingAllreduce(*mesh, data, count, dtype, op, &scratch_); });
    }
    return run("CROSS_NODE_ALLREDUCE", id,
               [&] { return collective::recursiveDoublingAllreduce(*mesh, data, count, dtype, op); });
  }
  ASSIGN_OR_RETURN(auto ring, noted(id, endpoints_->ring(id, until, epoch_, nodes)));
  if (!ring) return okStatus();
  return run("CROSS_NODE_ALLREDUCE", id,
             [&] { return collective::ringAllreduce(*ring, data, count, dtype, op, &scratch_); });
}

StatusOr<std::optional<collective::LinkCost>> PeerDataPlane::linkCost(const collective::TransferId& id,
                                                                      CrossClock::time_point until,
                                                                      const executor::NodeSet& nodes) {
  if (!measure_links_) return std::optional<collective::LinkCost>(collective::LinkCost{});
  auto known = link_costs_.find(nodes);
  if (known != link_costs_.end()) return std::optional<collective::LinkCost>(known->second);
  ASSIGN_OR_RETURN(auto mesh, noted(id, endpoints_->mesh(id, until, epoch_, nodes)));
  if (!mesh) return std::optional<collective::LinkCost>();
  collective::LinkCost cost;
  RETURN_IF_ERROR(run("CROSS_NODE_LINK_PROBE", id, [&]() -> Status {
    ASSIGN_OR_RETURN(cost, collective::probeLinkCost(*mesh));
    return okStatus();
  }));
  link_costs_.emplace(nodes, cost);
  link_latency_us_.store(cost.latency_us);
  link_message_us_.store(cost.message_us);
  link_bytes_per_second_.store(1e6 / cost.byte_us);
  if (hooks_.measured) hooks_.measured(nodes.size(), cost);
  return std::optional<collective::LinkCost>(cost);
}

void PeerDataPlane::describe(v1::JobInfo* info) const {
  const std::vector<uint64_t> by_algorithm = allreducesByAlgorithm();
  info->set_allreduces_direct(by_algorithm[0]);
  info->set_allreduces_doubling(by_algorithm[1]);
  info->set_allreduces_ring(by_algorithm[2]);
  info->set_allreduces_halving(by_algorithm[3]);
  info->set_stray_transfers_dropped(straysDropped());
  info->set_link_latency_us(link_latency_us_.load());
  info->set_link_message_us(link_message_us_.load());
  info->set_link_bytes_per_second(link_bytes_per_second_.load());
}

Status PeerDataPlane::reduceScatter(const executor::NodeSet& nodes, const void* input, void* data, DataType dtype,
                                    ReduceOp op, const std::vector<std::vector<collective::ElementRange>>& owned) {
  const collective::TransferId id = nextCall();
  if (nodes.size() < 2) {  // one node: its contribution is the reduction
    if (input != data) copyOwned(input, data, dtype, owned);
    return okStatus();
  }
  ASSIGN_OR_RETURN(auto ring, noted(id, endpoints_->ring(id, deadline(), epoch_, nodes)));
  if (!ring) return okStatus();
  return run("CROSS_NODE_REDUCESCATTER", id, [&] {
    return collective::ringReduceScatter(*ring, input, data, dtype, op, amongNodes(owned, nodes), &scratch_);
  });
}

Status PeerDataPlane::broadcast(const executor::NodeSet& nodes, void* data, size_t bytes, int root_rank) {
  const collective::TransferId id = nextCall();
  if (nodes.size() < 2) return okStatus();  // the root's node is the only one
  const auto root = std::find(nodes.begin(), nodes.end(), nodeOf(root_rank));
  if (root == nodes.end()) {
    return internalError("broadcast root rank " + std::to_string(root_rank) + " on no node of the set");
  }
  ASSIGN_OR_RETURN(auto ring, noted(id, endpoints_->ring(id, deadline(), epoch_, nodes)));
  if (!ring) return okStatus();
  return run("CROSS_NODE_BROADCAST", id,
             [&] { return collective::ringBroadcast(*ring, data, bytes, static_cast<int>(root - nodes.begin())); });
}

Status PeerDataPlane::allgather(const executor::NodeSet& nodes, uint8_t* buffer,
                                const std::vector<std::vector<collective::Range>>& owned) {
  const collective::TransferId id = nextCall();
  if (nodes.size() < 2) return okStatus();  // every row is on this node
  ASSIGN_OR_RETURN(auto ring, noted(id, endpoints_->ring(id, deadline(), epoch_, nodes)));
  if (!ring) return okStatus();
  return run("CROSS_NODE_ALLGATHER", id,
             [&] { return collective::ringAllgather(*ring, buffer, amongNodes(owned, nodes)); });
}

Status PeerDataPlane::alltoall(const executor::NodeSet& nodes, const uint8_t* send,
                               const std::vector<collective::Range>& send_to, uint8_t* recv,
                               const std::vector<collective::Range>& recv_from) {
  const collective::TransferId id = nextCall();
  if (nodes.size() < 2) return okStatus();  // nothing crosses nodes
  ASSIGN_OR_RETURN(auto mesh, noted(id, endpoints_->mesh(id, deadline(), epoch_, nodes)));
  if (!mesh) return okStatus();
  return run("CROSS_NODE_ALLTOALL", id, [&] {
    return collective::pairwiseExchange(*mesh, send, amongNodes(send_to, nodes), recv, amongNodes(recv_from, nodes));
  });
}

executor::DataPlane::NcclPeers PeerDataPlane::ncclPeers() const {
  NcclPeers peers;
  const NodeEndpoints::NcclId nccl = endpoints_->ncclId();
  // The batch's epoch only: one that is over has no communicator (its
  // batch fails at its first step among the daemons).
  if (nccl.epoch != epoch_ || members_epoch_ != epoch_ || !every_node_nccl_) return peers;
  peers.id = nccl.id;
  peers.rank = nccl.self;
  peers.nranks = static_cast<int>(members_.size());
  peers.epoch = epoch_;
  return peers;
}

}  // namespace gradsync::peer
