// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/broadcast_across_daemons.h"

#include "base/dtype.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"

namespace gradsync::executor {

Status BroadcastAcrossDaemons::broadcast(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(std::vector<Members> groups, gpus_->resolveByDevice(r, access));
  const Request& first = r.first();
  if (first.length > 0) {  // every node decides alike
    ASSIGN_OR_RETURN(NodesComm nodes,
                     daemons_->forResponse(r, access, daemons_->leadDevice(JobGpus::firstDevice(groups)), v1::UINT8));
    if (nodes.outside) return okStatus();  // a process set with no rank here
    if (nodes.comm != nullptr) return ncclBroadcast(r, access, nodes, std::move(groups));
  }
  // No member of the set here (the call only keeps the ring sequence), or
  // local members without elements: the ring still runs.
  if (groups.empty() || groups.front().device < 0) {
    std::vector<uint8_t> none(1);
    return access.dataPlane().broadcast(nodesOf(r, access), none.data(), 0, first.root_rank);
  }
  uint8_t* root = nullptr;
  int root_gpu = -1;  // the root's GPU here, as an index into groups
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& member : groups[g].list) {
      if (member.rank != first.root_rank) continue;
      root = member.data;
      root_gpu = static_cast<int>(g);
    }
  }
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  uint8_t* host = gpus_->staging(first.length);
  Status status = [&]() -> Status {
    RETURN_IF_ERROR(gpus_->waitReadyOnGpus(groups, &waited));
    if (root != nullptr) {
      // Bounded wait first: a copy to pageable memory blocks the host until
      // the stream reaches it, and the stream waits on the ranks' events.
      const Members& home = groups[root_gpu];
      RETURN_IF_ERROR(ops_->select(home.device));
      RETURN_IF_ERROR(ops_->waitStream(home.stream, "waiting for the root's tensor"));
      RETURN_IF_ERROR(context(ops_->copy(host, root, first.length, gpu::CopyKind::kDeviceToHost, home.stream),
                              "tensor '" + r.name + "': copy of the root's tensor to the staging buffer"));
    }
    RETURN_IF_ERROR(access.dataPlane().broadcast(nodesOf(r, access), host, first.length, first.root_rank));
    for (const auto& group : groups) {
      RETURN_IF_ERROR(ops_->select(group.device));
      for (const auto& member : group.list) {
        if (member.data == root) continue;
        RETURN_IF_ERROR(context(ops_->copy(member.data, host, first.length, gpu::CopyKind::kHostToDevice, group.stream),
                                "tensor '" + r.name + "': copy to rank " + std::to_string(member.rank)));
      }
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  // (Also after an error: copies from the staging buffer may be queued.)
  return gpus_->drainStaging(groups, status);
}

Status BroadcastAcrossDaemons::ncclBroadcast(const Response& r, RankAccess& access, const NodesComm& nodes,
                                             std::vector<Members> resolved) {
  // Between the communicator's GPUs of the nodes (it may hold none of the
  // ranks here: then its fusion buffer is the landing place); on the root's
  // node from the root's GPU to the others first, on the other nodes from
  // the communicator's GPU to the others after.
  ASSIGN_OR_RETURN(std::vector<Members> groups, gpus_->withLead(std::move(resolved), nodes.comm->devices().front()));
  const Request& first = r.first();
  int root_gpu = -1;           // the root's GPU here, as an index into groups
  std::vector<void*> landing;  // per GPU: the root's tensor there, the first member's elsewhere
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].list.empty()) {
      ASSIGN_OR_RETURN(gpu::GrowingBuffer * fusion, gpus_->fusionFor(groups[g].device));
      ASSIGN_OR_RETURN(uint8_t * place, fusion->reserve(first.length));
      landing.push_back(place);
      continue;
    }
    landing.push_back(groups[g].list.front().data);
    for (const auto& member : groups[g].list) {
      if (member.rank != first.root_rank) continue;
      root_gpu = static_cast<int>(g);
      landing.back() = member.data;
    }
  }
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  Status status = [&]() -> Status {
    RETURN_IF_ERROR(gpus_->waitReadyOnGpus(groups, &waited));
    if (root_gpu > 0)
      RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, landing, first.length, v1::SUM, root_gpu, access));
    RETURN_IF_ERROR(ops_->select(groups.front().device));
    Status sent =
        nodes.comm->broadcast({landing.front()}, first.length, nodes.rankOf(access.dataPlane().nodeOf(first.root_rank)),
                              {groups.front().stream}, DaemonComms::waitFor(access));
    if (!sent.isOk()) sent = daemons_->fail(sent, access);
    RETURN_IF_ERROR(context(sent, "tensor '" + r.name + "'"));
    if (root_gpu <= 0 && groups.size() > 1) {
      RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, landing, first.length, v1::SUM, 0, access));
    }
    return node_gpus_->copyFromLanding(r, groups, landing);
  }();
  return gpus_->recordDoneOnGpus(groups, waited, status);
}

}  // namespace gradsync::executor
