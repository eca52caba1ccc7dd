// SPDX-License-Identifier: Apache-2.0
// GpusAcrossDaemons over NCCL for allgather, alltoall and
// reducescatter (every node decides alike: the daemons' communicator exists;
// reducescatter also has elements), over the job's communicator or a
// process set's split of it (daemon_comms.h).
//
// Several GPUs here: their ranks' inputs are first gathered on every GPU of
// the node (node_gpus_gather.cc's blocks). Then, on the lead GPU
// (the one of the daemons' communicator):
// - allgather: this node's inputs, end to end in request order, into its
//   block of a buffer of one block per node (blocks as large as the largest
//   node's share), an in-place ncclAllGather, the buffer to the node's other
//   GPUs, and each rank's output from its GPU's copy;
// - alltoall: the messages to each other node packed as the ring's
//   exchange packs them (executor_util.h's routes), grouped ncclSend and
//   ncclRecv with each node, the received messages to the other GPUs, and
//   each rank's output from its GPU's inputs and messages.
// - reducescatter: the node's GPUs' sum allreduced among the nodes, to the
//   other GPUs, and each rank's rows (an allreduce: twice the bytes of a
//   reduce-scatter, whose equal blocks per node the ranks' rows rarely
//   make, but one call and no layout across nodes).
#include <algorithm>
#include <functional>

#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpus_across_daemons.h"

namespace gradsync::executor {
namespace {

constexpr size_t kAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Allgather among the nodes: each node's share of the gathered tensor in
// one block; at[i]: where request i's input lies.
struct NodeBlocks {
  std::vector<size_t> at;
  size_t block = 0;
};

// `rank_of(node)`: the node's rank in the communicator (blocks in rank
// order).
NodeBlocks nodeBlocks(const Response& r, RankAccess& access, size_t ranks, const std::function<int(int)>& rank_of) {
  std::vector<size_t> used(ranks, 0), rank(r.requests.size());
  NodeBlocks blocks;
  for (size_t i = 0; i < r.requests.size(); ++i) {
    rank[i] = static_cast<size_t>(rank_of(access.dataPlane().nodeOf(r.requests[i]->rank)));
    blocks.at.push_back(used[rank[i]]);
    used[rank[i]] += r.requests[i]->length;
  }
  blocks.block = aligned(*std::max_element(used.begin(), used.end()));
  for (size_t i = 0; i < r.requests.size(); ++i) blocks.at[i] += rank[i] * blocks.block;
  return blocks;
}

// The ranges of `by_node` (indexed by node) for the communicator's ranks,
// whose nodes `nodes` lists.
std::vector<gpu::NcclComm::PeerBytes> peerBytes(const std::vector<collective::Range>& by_node, const NodeSet& nodes) {
  std::vector<gpu::NcclComm::PeerBytes> out;
  for (int node : nodes) out.push_back({by_node[node].offset, by_node[node].bytes});
  return out;
}

}  // namespace

StatusOr<std::vector<GpusAcrossDaemons::Members>> GpusAcrossDaemons::withLead(std::vector<Members> groups, int lead) {
  if (groups.empty() || groups.front().device < 0) return groups;  // no memory of a local rank here
  auto at = std::find_if(groups.begin(), groups.end(), [&](const Members& m) { return m.device == lead; });
  if (at == groups.end()) {
    Members empty;
    empty.device = lead;
    ASSIGN_OR_RETURN(empty.stream, gpus_->streamFor(lead));
    groups.insert(groups.begin(), std::move(empty));
  } else {
    std::rotate(groups.begin(), at, at + 1);
  }
  return groups;
}

// Where an allgather's or alltoall's bytes lie in each GPU's fusion buffer:
// with several GPUs, first every local input (local_at, local_bytes); then,
// among the nodes, allgather's blocks, or alltoall's send and receive buffers.
struct GpusAcrossDaemons::GatherLikePlan {
  bool gather = false;                     // allgather (else alltoall)
  std::vector<std::vector<size_t>> index;  // by group: its members' requests
  // Several GPUs: local_at[i], where local request i's input lies on each
  // GPU once their blocks were gathered (the first local_bytes of each
  // GPU's buffer).
  std::vector<size_t> local_at;
  size_t local_block = 0;
  size_t local_bytes = 0;
  NodeBlocks blocks;      // allgather
  AlltoallRoutes routes;  // alltoall
  size_t send_bytes = 0;  // alltoall: the send buffer, aligned
  size_t cross_bytes = 0;
  std::vector<uint8_t*> buffers;  // by group, once reserved

  // What came from the other nodes, and where it lies in each buffer.
  size_t received() const { return gather ? cross_bytes : routes.recv_bytes; }
  size_t receivedAt() const { return local_bytes + (gather ? 0 : send_bytes); }
  // Where local request i's input lies on the GPU of group g.
  const uint8_t* input(const std::vector<Members>& groups, size_t g, size_t i) const {
    if (groups.size() > 1) return buffers[g] + local_at[i];
    for (size_t k = 0; k < index[0].size(); ++k) {
      if (index[0][k] == i) return groups[0].list[k].data;
    }
    return nullptr;
  }
};

GpusAcrossDaemons::GatherLikePlan GpusAcrossDaemons::planGatherLike(const Response& r, RankAccess& access,
                                                                    const NodesComm& nodes_comm,
                                                                    const std::vector<Members>& groups) {
  GatherLikePlan plan;
  plan.gather = r.type == v1::ALLGATHER;
  for (const auto& group : groups) plan.index.push_back(JobGpus::memberIndices(r, group));
  plan.local_at.assign(r.requests.size(), 0);
  if (groups.size() > 1) {
    for (const auto& member_index : plan.index) {
      size_t used = 0;
      for (size_t i : member_index) {
        plan.local_at[i] = used;
        used += r.requests[i]->length;
      }
      plan.local_block = std::max(plan.local_block, used);
    }
    plan.local_block = aligned(plan.local_block);
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i : plan.index[g]) plan.local_at[i] += g * plan.local_block;
    }
  }
  plan.local_bytes = plan.local_block * groups.size();
  const size_t nodes = nodes_comm.nodes.size();  // the communicator's ranks
  if (plan.gather) {
    plan.blocks = nodeBlocks(r, access, nodes, [&](int node) { return nodes_comm.rankOf(node); });
    plan.cross_bytes = plan.blocks.block * nodes;
  } else {
    plan.routes = alltoallRoutes(r, access);
    plan.send_bytes = aligned(plan.routes.send_bytes);
    plan.cross_bytes = plan.send_bytes + plan.routes.recv_bytes;
  }
  return plan;
}

Status GpusAcrossDaemons::gatherInputsOnEveryGpu(const Response& r, const std::vector<Members>& groups,
                                                 const GatherLikePlan& plan, RankAccess& access) {
  for (size_t g = 0; g < groups.size(); ++g) {
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    for (size_t k = 0; k < groups[g].list.size(); ++k) {
      const size_t i = plan.index[g][k];
      if (r.requests[i]->length == 0) continue;
      RETURN_IF_ERROR(
          context(ops_->copy(plan.buffers[g] + plan.local_at[i], groups[g].list[k].data, r.requests[i]->length,
                             gpu::CopyKind::kDeviceToDevice, groups[g].stream),
                  "tensor '" + r.name + "': copy of rank " + std::to_string(groups[g].list[k].rank) + "'s input"));
    }
  }
  if (plan.local_block == 0) return okStatus();
  std::vector<void*> local(plan.buffers.begin(), plan.buffers.end());
  return node_gpus_->gatherAcrossGpus(r, groups, local, plan.local_block, access);
}

Status GpusAcrossDaemons::packForTheNodes(const Response& r, const std::vector<Members>& groups,
                                          const GatherLikePlan& plan) {
  const Members& lead = groups.front();
  uint8_t* cross = plan.buffers.front() + plan.local_bytes;
  std::vector<std::pair<const uint8_t*, size_t>> parts;  // (from, bytes), in buffer order
  std::vector<size_t> to;
  if (plan.gather) {
    for (const auto& member_index : plan.index) {
      for (size_t i : member_index) {
        parts.push_back({plan.input(groups, 0, i), r.requests[i]->length});
        to.push_back(plan.blocks.at[i]);
      }
    }
  } else {
    size_t at = 0;
    for (const auto& piece : plan.routes.pack) {
      parts.push_back({plan.input(groups, 0, piece.request) + piece.offset, piece.bytes});
      to.push_back(at);
      at += piece.bytes;
    }
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].second == 0) continue;
    RETURN_IF_ERROR(
        context(ops_->copy(cross + to[p], parts[p].first, parts[p].second, gpu::CopyKind::kDeviceToDevice, lead.stream),
                "tensor '" + r.name + "': copy to the buffer among the nodes"));
  }
  return okStatus();
}

Status GpusAcrossDaemons::exchangeAmongTheNodes(const Response& r, RankAccess& access, const NodesComm& nodes_comm,
                                                const Members& lead, const GatherLikePlan& plan) {
  uint8_t* cross = plan.buffers.front() + plan.local_bytes;
  Status moved = okStatus();
  if (plan.gather && plan.blocks.block > 0) {
    PhaseScope phase(access, "NCCL_ALLGATHER");
    moved = nodes_comm.comm->allGather({cross}, plan.blocks.block, {lead.stream}, DaemonComms::waitFor(access));
  } else if (!plan.gather) {
    PhaseScope phase(access, "NCCL_ALLTOALL");
    moved = nodes_comm.comm->exchange(cross, peerBytes(plan.routes.send_to, nodes_comm.nodes), cross + plan.send_bytes,
                                      peerBytes(plan.routes.recv_from, nodes_comm.nodes), lead.stream,
                                      DaemonComms::waitFor(access));
  }
  if (!moved.isOk()) moved = daemons_.fail(moved, access);
  return context(moved, "tensor '" + r.name + "'");
}

Status GpusAcrossDaemons::writeGatherLikeOutputs(const Response& r, const std::vector<Members>& groups,
                                                 const GatherLikePlan& plan, RankAccess& access) {
  // What came from the other nodes, to the other GPUs here.
  if (groups.size() > 1 && plan.received() > 0) {
    std::vector<void*> landing;
    for (uint8_t* buffer : plan.buffers) landing.push_back(buffer + plan.receivedAt());
    RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, landing, plan.received(), v1::SUM, 0, access));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    if (plan.gather) {
      RETURN_IF_ERROR(node_gpus_->copyFromGathered(r, groups[g], plan.index[g], plan.blocks.at,
                                                   plan.buffers[g] + plan.local_bytes));
      continue;
    }
    for (size_t k = 0; k < groups[g].list.size(); ++k) {
      size_t written = 0;
      for (const auto& piece : plan.routes.output[plan.index[g][k]]) {
        const uint8_t* from = piece.remote ? plan.buffers[g] + plan.receivedAt() + piece.offset
                                           : plan.input(groups, g, piece.request) + piece.offset;
        if (piece.bytes > 0) {
          RETURN_IF_ERROR(context(ops_->copy(groups[g].list[k].output + written, from, piece.bytes,
                                             gpu::CopyKind::kDeviceToDevice, groups[g].stream),
                                  "tensor '" + r.name + "': copy to rank " + std::to_string(groups[g].list[k].rank)));
        }
        written += piece.bytes;
      }
    }
  }
  return okStatus();
}

Status GpusAcrossDaemons::runGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes_comm,
                                        const std::vector<Members>& groups, const std::vector<uint64_t>& out_bytes,
                                        GatherLikePlan& plan, size_t* waited) {
  for (size_t g = 0; g < groups.size(); ++g) {
    RETURN_IF_ERROR(JobGpus::checkOutputs(r, groups[g], JobGpus::localBytes(groups[g], plan.index[g], out_bytes)));
  }
  if (groups.empty() || groups.front().device < 0) {
    // No local rank holds memory: nothing to send or receive here.
    if (plan.cross_bytes == 0 || (!plan.gather && plan.routes.send_bytes == 0 && plan.routes.recv_bytes == 0)) {
      return okStatus();
    }
    return internalError("tensor '" + r.name + "': this node's ranks have no memory for the exchange");
  }
  for (const auto& group : groups) {
    ASSIGN_OR_RETURN(gpu::GrowingBuffer * buffer, gpus_->fusionFor(group.device));
    ASSIGN_OR_RETURN(uint8_t * data, buffer->reserve(std::max<size_t>(plan.local_bytes + plan.cross_bytes, 1)));
    plan.buffers.push_back(data);
  }
  RETURN_IF_ERROR(gpus_->waitReadyOnGpus(groups, waited));
  if (groups.size() > 1) RETURN_IF_ERROR(gatherInputsOnEveryGpu(r, groups, plan, access));
  RETURN_IF_ERROR(ops_->select(groups.front().device));
  RETURN_IF_ERROR(packForTheNodes(r, groups, plan));
  RETURN_IF_ERROR(exchangeAmongTheNodes(r, access, nodes_comm, groups.front(), plan));
  return writeGatherLikeOutputs(r, groups, plan, access);
}

ResponseResult GpusAcrossDaemons::ncclGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes_comm,
                                                 std::vector<Members> resolved) {
  auto arranged = withLead(std::move(resolved), nodes_comm.comm->devices().front());
  if (!arranged.isOk()) return failed(r, arranged.status());
  const std::vector<Members>& groups = *arranged;
  ResponseResult result = failed(r, okStatus());
  const std::vector<uint64_t> out_bytes = gatheredBytes(r, &result);
  GatherLikePlan plan = planGatherLike(r, access, nodes_comm, groups);
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  Status status = runGatherLike(r, access, nodes_comm, groups, out_bytes, plan, &waited);
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return status.isOk() ? result : failed(r, status);
}

ResponseResult GpusAcrossDaemons::ncclReducescatter(const Response& r, RankAccess& access, gpu::NcclComm* comm,
                                                    std::vector<Members> resolved) {
  const Request& first = r.first();
  if (Status valid = checkReduction(r.name, first); !valid.isOk()) return failed(r, valid);
  const ReduceOp across = first.op == v1::AVERAGE ? v1::SUM : first.op;  // the average comes last
  const std::vector<int64_t> rows = reducescatterRows(r);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  auto arranged = withLead(std::move(resolved), comm->devices().front());
  if (!arranged.isOk()) return failed(r, arranged.status());
  const std::vector<Members>& groups = *arranged;
  if (groups.empty() || groups.front().device < 0) {
    return failed(r, internalError("tensor '" + r.name + "': this node's ranks have no memory for the reducescatter"));
  }
  // The lead GPU (the daemons' communicator's) may hold none of this job's
  // ranks: it then takes the other GPUs' sum.
  const size_t with_ranks = groups.front().list.empty() ? 1 : 0;
  size_t waited = 0;
  Status status = [&]() -> Status {
    ASSIGN_OR_RETURN(const std::vector<std::vector<size_t>> index, JobGpus::checkedIndices(r, groups, layout.bytes));
    ASSIGN_OR_RETURN(std::vector<void*> fused, node_gpus_->reduceEachGpu(r, groups, across, &waited));
    if (groups.size() - with_ranks > 1) {
      const std::vector<Members> ranked(groups.begin() + with_ranks, groups.end());
      RETURN_IF_ERROR(node_gpus_->acrossGpus(r, ranked, {fused.begin() + with_ranks, fused.end()}, first.length, across,
                                             -1, access));
    }
    const Members& lead = groups.front();
    if (with_ranks > 0) {  // a peer copy once the sum is there
      RETURN_IF_ERROR(ops_->select(groups[1].device));
      RETURN_IF_ERROR(ops_->waitStream(groups[1].stream, "waiting for the local reduction"));
      RETURN_IF_ERROR(ops_->select(lead.device));
      RETURN_IF_ERROR(ops_->copy(fused[0], fused[1], first.length, gpu::CopyKind::kDeviceToDevice, lead.stream));
    }
    RETURN_IF_ERROR(ops_->select(lead.device));
    {
      // allReduce waits for the stream: the phase covers the local reduction too.
      PhaseScope phase(access, "NCCL_ALLREDUCE");
      Status reduced = comm->allReduce({fused[0]}, first.length / elementSize(first.dtype), first.dtype, across,
                                       {lead.stream}, DaemonComms::waitFor(access));
      if (!reduced.isOk()) reduced = daemons_.fail(reduced, access);
      RETURN_IF_ERROR(context(reduced, "tensor '" + r.name + "'"));
    }
    if (groups.size() > 1) RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, fused, first.length, v1::SUM, 0, access));
    for (size_t g = with_ranks; g < groups.size(); ++g) {  // each rank's rows, with the average and postscale
      RETURN_IF_ERROR(ops_->select(groups[g].device));
      RETURN_IF_ERROR(node_gpus_->scatterRows(r, groups[g], index[g], rows, static_cast<const uint8_t*>(fused[g])));
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return status.isOk() ? result : failed(r, status);
}

int GpusAcrossDaemons::leadDevice(const std::vector<Members>& groups) const {
  if (daemons_.device() >= 0) return daemons_.device();
  return !groups.empty() && groups.front().device >= 0 ? groups.front().device : 0;
}

}  // namespace gradsync::executor
