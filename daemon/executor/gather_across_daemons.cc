// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/gather_across_daemons.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "base/dtype.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"

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

// Where each request's input lies when every rank's input is laid end to
// end (the ring's buffer), and which node owns which ranges of it.
struct GatherLayout {
  std::vector<size_t> offset;  // parallel to r.requests
  size_t total = 0;
  std::vector<std::vector<collective::Range>> owned;  // per node
};

GatherLayout gatherLayout(const Response& r, RankAccess& access) {
  GatherLayout layout;
  layout.owned.resize(access.dataPlane().nodeCount());
  for (const auto& request : r.requests) {
    layout.offset.push_back(layout.total);
    layout.owned[access.dataPlane().nodeOf(request->rank)].push_back({layout.total, request->length});
    layout.total += request->length;
  }
  return layout;
}

}  // namespace

std::vector<uint64_t> gatheredBytes(const Response& r, ResponseResult* result) {
  if (r.type != v1::ALLGATHER) return alltoallLayout(r, result).bytes;
  int64_t total_rows = 0;
  for (const auto& request : r.requests) total_rows += request->shape.empty() ? 1 : request->shape[0];
  const std::vector<int64_t> gathered_shape = withFirstDim(r.first().shape, total_rows);
  for (auto& member : result->members) member.output_shape = gathered_shape;
  return std::vector<uint64_t>(r.requests.size(), total_rows * rowBytes(r.first()));
}

// Where an allgather's or alltoall's bytes lie in each GPU's fusion buffer:
// with several GPUs, first every local input (local_at, local_bytes); then,
// among the nodes, allgather's blocks, or alltoall's send and receive buffers.
struct GatherAcrossDaemons::GatherLikePlan {
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

ResponseResult GatherAcrossDaemons::gatherLike(const Response& r, RankAccess& access) {
  auto resolved = gpus_->resolveByDevice(r, access);
  if (!resolved.isOk()) return failed(r, resolved.status());
  {  // every node decides alike
    auto nodes = daemons_->forResponse(r, access, daemons_->leadDevice(JobGpus::firstDevice(*resolved)), v1::UINT8);
    if (!nodes.isOk()) return failed(r, nodes.status());
    if (nodes->outside) return failed(r, okStatus());  // a process set with no rank here
    if (nodes->comm != nullptr) return ncclGatherLike(r, access, *nodes, std::move(resolved).value());
  }
  return hostGatherLike(r, access, *resolved);
}

ResponseResult GatherAcrossDaemons::hostGatherLike(const Response& r, RankAccess& access,
                                                   const std::vector<Members>& groups) {
  // (By GPU: each stages through the same host buffer.)
  std::vector<std::vector<size_t>> index;
  for (const auto& group : groups) index.push_back(JobGpus::memberIndices(r, group));
  const GatherLayout layout = gatherLayout(r, access);
  ResponseResult result = failed(r, okStatus());
  const std::vector<uint64_t> out_bytes = gatheredBytes(r, &result);
  // Alltoall: each rank's input at layout.offset, then the messages to the
  // other nodes and from them (a pairwise exchange, as on the CPU path).
  const AlltoallRoutes routes = r.type == v1::ALLTOALL ? alltoallRoutes(r, access) : AlltoallRoutes();
  uint8_t* host = gpus_->staging(std::max<size_t>(layout.total + routes.send_bytes + routes.recv_bytes, 1));
  uint8_t* send = host + layout.total;
  uint8_t* recv = send + routes.send_bytes;
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  Status status = [&]() -> Status {
    for (size_t g = 0; g < groups.size(); ++g) {
      RETURN_IF_ERROR(JobGpus::checkOutputs(r, groups[g], JobGpus::localBytes(groups[g], index[g], out_bytes)));
    }
    RETURN_IF_ERROR(gpus_->waitReadyOnGpus(groups, &waited));
    {
      PhaseScope phase(access, "MEMCPY_DEVICE_TO_HOST");
      for (size_t g = 0; g < groups.size(); ++g) {
        if (groups[g].device >= 0) RETURN_IF_ERROR(ops_->select(groups[g].device));
        RETURN_IF_ERROR(gpus_->stageInputs(r, groups[g], index[g], layout.offset, host));
      }
    }
    if (r.type == v1::ALLGATHER) RETURN_IF_ERROR(access.dataPlane().allgather(nodesOf(r, access), host, layout.owned));
    if (r.type == v1::ALLTOALL) {
      RETURN_IF_ERROR(stagedAlltoallExchange(r, access, groups, routes, layout.offset, host, send, recv));
    }
    PhaseScope phase(access, "MEMCPY_HOST_TO_DEVICE");
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].device >= 0) RETURN_IF_ERROR(ops_->select(groups[g].device));
      RETURN_IF_ERROR(copyGatheredOut(r, groups[g], index[g], layout.offset, layout.total, routes, host, recv));
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  status = gpus_->drainStaging(groups, status);
  return status.isOk() ? result : failed(r, status);
}

Status GatherAcrossDaemons::stagedAlltoallExchange(const Response& r, RankAccess& access,
                                                   const std::vector<Members>& groups, const AlltoallRoutes& routes,
                                                   const std::vector<size_t>& offset, const uint8_t* host,
                                                   uint8_t* send, uint8_t* recv) {
  for (const auto& group : groups) {
    if (group.stream != nullptr)
      RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the copies to the staging buffer"));
  }
  size_t at = 0;
  for (const auto& piece : routes.pack) {
    std::memcpy(send + at, host + offset[piece.request] + piece.offset, piece.bytes);
    at += piece.bytes;
  }
  return access.dataPlane().alltoall(nodesOf(r, access), send, routes.send_to, recv, routes.recv_from);
}

Status GatherAcrossDaemons::copyGatheredOut(const Response& r, const Members& m, const std::vector<size_t>& index,
                                            const std::vector<size_t>& offset, size_t total,
                                            const AlltoallRoutes& routes, const uint8_t* host, const uint8_t* recv) {
  for (size_t k = 0; k < m.list.size(); ++k) {
    const std::string what = "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[k].rank);
    if (r.type == v1::ALLGATHER) {
      if (total > 0) {
        RETURN_IF_ERROR(
            context(ops_->copy(m.list[k].output, host, total, gpu::CopyKind::kHostToDevice, m.stream), what));
      }
      continue;
    }
    size_t written = 0;
    for (const auto& piece : routes.output[index[k]]) {
      const uint8_t* from = piece.remote ? recv + piece.offset : host + offset[piece.request] + piece.offset;
      if (piece.bytes > 0) {
        RETURN_IF_ERROR(context(
            ops_->copy(m.list[k].output + written, from, piece.bytes, gpu::CopyKind::kHostToDevice, m.stream), what));
      }
      written += piece.bytes;
    }
  }
  return okStatus();
}

GatherAcrossDaemons::GatherLikePlan GatherAcrossDaemons::planGatherLike(const Response& r, RankAccess& access,
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

Status GatherAcrossDaemons::gatherInputsOnEveryGpu(const Response& r, const std::vector<Members>& groups,
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

Status GatherAcrossDaemons::packForTheNodes(const Response& r, const std::vector<Members>& groups,
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

Status GatherAcrossDaemons::exchangeAmongTheNodes(const Response& r, RankAccess& access, const NodesComm& nodes_comm,
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
  if (!moved.isOk()) moved = daemons_->fail(moved, access);
  return context(moved, "tensor '" + r.name + "'");
}

Status GatherAcrossDaemons::writeGatherLikeOutputs(const Response& r, const std::vector<Members>& groups,
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

Status GatherAcrossDaemons::runGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes_comm,
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

ResponseResult GatherAcrossDaemons::ncclGatherLike(const Response& r, RankAccess& access, const NodesComm& nodes_comm,
                                                   std::vector<Members> resolved) {
  auto arranged = gpus_->withLead(std::move(resolved), nodes_comm.comm->devices().front());
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

}  // namespace gradsync::executor
