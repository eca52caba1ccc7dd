// SPDX-License-Identifier: Apache-2.0
// GpusAcrossDaemons: allreduce and broadcast: the node's ranks reduced on its GPU, then NCCL
// among the daemons' GPUs or host staging through the daemons' ring.
#include <algorithm>
#include <set>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"
#include "daemon/executor/gpus_across_daemons.h"

namespace gradsync::executor {

Status GpusAcrossDaemons::allreduce(const std::vector<const Response*>& responses, RankAccess& access) {
  const Request& first = responses.front()->first();
  RETURN_IF_ERROR(checkReduction(responses.front()->name, first));
  FusedAllreduce f{responses, access, first, elementSize(first.dtype), first.op == v1::AVERAGE ? v1::SUM : first.op};
  std::vector<std::vector<Members>> groups;  // per response, by GPU
  std::set<int> devices;
  for (const Response* r : responses) {
    ASSIGN_OR_RETURN(std::vector<Members> by_device, gpus_->resolveByDevice(*r, access));
    for (const auto& group : by_device) {
      if (group.device >= 0) devices.insert(group.device);
    }
    groups.push_back(std::move(by_device));
  }
  // Every node decides alike: same membership, same batch, same dtype.
  const int lead = daemons_.active() ? daemons_.device() : devices.empty() ? 0 : *devices.begin();
  ASSIGN_OR_RETURN(NodesComm nodes, daemons_.forResponse(*responses.front(), access, lead, first.dtype));
  if (nodes.outside) return okStatus();  // a process set with no rank here
  gpu::NcclComm* comm = nodes.comm;
  // The GPU of the daemons' communicator takes part (with identities where
  // no local rank uses it) and leads: the communicator stays on the GPU it
  // was formed on, whichever GPUs a batch's ranks use.
  if (comm != nullptr && !devices.empty()) devices.insert(daemons_.device());
  if (devices.size() > 1) {
    std::vector<int> ordered(devices.begin(), devices.end());
    const int first_device = comm != nullptr ? daemons_.device() : ordered.front();
    std::rotate(ordered.begin(), std::find(ordered.begin(), ordered.end(), first_device),
                std::find(ordered.begin(), ordered.end(), first_device) + 1);
    return multiGpuStagedAllreduce(responses, access, std::move(groups), ordered, comm);
  }
  return oneGpuAllreduce(f, groups, devices.empty() ? -1 : *devices.begin(), comm);
}

Status GpusAcrossDaemons::oneGpuAllreduce(FusedAllreduce& f, std::vector<std::vector<Members>>& groups, int device,
                                          gpu::NcclComm* comm) {
  for (size_t t = 0; t < f.responses.size(); ++t) {
    const Response* r = f.responses[t];
    Members m = groups[t].empty() ? Members{} : std::move(groups[t].front());
    if (r->first().length == 0) m.list.clear();  // no elements: contributes an empty range
    f.offsets.push_back(f.total);
    f.total += r->first().length / f.esize;
    f.members.push_back(std::move(m));
  }
  // The previous batch read the staging buffer before it returned (waited).
  f.staging = gpus_->staging(f.total * f.esize);
  if (device < 0 && comm == nullptr) {
    // No local rank takes part (joined ranks): add identities only.
    fillIdentity(f.staging, f.total, f.first.dtype, f.ring_op);
    return f.access.dataPlane().allreduce(nodesOf(*f.responses.front(), f.access), f.staging, f.total, f.first.dtype,
                                          f.ring_op);
  }
  if (device < 0) device = daemons_.device();
  ASSIGN_OR_RETURN(f.stream, gpus_->streamFor(device));
  ASSIGN_OR_RETURN(gpu::GrowingBuffer * fusion, gpus_->fusionFor(device));
  ASSIGN_OR_RETURN(f.fused, fusion->reserve(f.total * f.esize));
  std::vector<const Members*> waited;  // their done events are recorded whatever happens next
  GpuPhaseTimer timer(ops_, f.access, device, f.stream);
  Status status = reduceAcrossNodesAndBack(f, comm, timer, &waited);
  for (const Members* m : waited) status = gpus_->recordDoneAfter(*m, status);
  timer.finish();
  return status;
}

Status GpusAcrossDaemons::reduceAcrossNodesAndBack(const FusedAllreduce& f, gpu::NcclComm* comm, GpuPhaseTimer& timer,
                                                   std::vector<const Members*>* waited) {
  timer.begin("GPU_REDUCE");
  RETURN_IF_ERROR(reduceIntoFused(f, waited));
  timer.end();
  if (comm != nullptr) {
    timer.begin("GPU_NCCL_ALLREDUCE");
    RETURN_IF_ERROR(ncclAcrossNodes(f, comm));
    timer.end();
  } else {
    RETURN_IF_ERROR(stagedAcrossNodes(f));
  }
  timer.begin("GPU_COPY");
  RETURN_IF_ERROR(scatterFromFused(f));
  timer.end();
  return okStatus();
}

Status GpusAcrossDaemons::reduceIntoFused(const FusedAllreduce& f, std::vector<const Members*>* waited) {
  // Local ranks into the device's fusion buffer (prescale, no average).
  for (size_t t = 0; t < f.responses.size(); ++t) {
    if (f.members[t].list.empty()) continue;
    RETURN_IF_ERROR(gpus_->waitReady(f.members[t]));
    waited->push_back(&f.members[t]);
    cuda::LocalReduceArgs gather;
    gather.dtype = static_cast<cuda::Dtype>(f.first.dtype);
    gather.op = static_cast<cuda::Op>(f.ring_op);
    for (size_t k = 0; k < f.members[t].list.size(); ++k) gather.inputs[k] = f.members[t].list[k].data;
    gather.num_inputs = static_cast<int>(f.members[t].list.size());
    gather.outputs[0] = f.fused + f.offsets[t] * f.esize;
    gather.num_outputs = 1;
    gather.count = f.responses[t]->first().length / f.esize;
    gather.prescale = f.first.prescale;
    RETURN_IF_ERROR(context(ops_->reduce(gather, f.stream), "tensor '" + f.responses[t]->name + "'"));
  }
  return okStatus();
}

Status GpusAcrossDaemons::ncclAcrossNodes(const FusedAllreduce& f, gpu::NcclComm* comm) {
  if (!f.filled) RETURN_IF_ERROR(fillIdentitiesOnDevice(f));  // where no local rank contributes
  // allReduce waits for the stream: the phase covers the local reduction too.
  PhaseScope phase(f.access, "NCCL_ALLREDUCE");
  Status reduced =
      comm->allReduce({f.fused}, f.total, f.first.dtype, f.ring_op, {f.stream}, DaemonComms::waitFor(f.access));
  if (!reduced.isOk()) reduced = daemons_.fail(reduced, f.access);
  return reduced;
}

Status GpusAcrossDaemons::stagedAcrossNodes(const FusedAllreduce& f) {
  // Bounded wait first: a copy to pageable memory blocks the host until
  // the stream reaches it, and the stream waits on the ranks' events.
  {
    PhaseScope phase(f.access, "WAIT_FOR_DATA_AND_LOCAL_REDUCE");
    RETURN_IF_ERROR(ops_->waitStream(f.stream, "waiting for the local reduction"));
  }
  const size_t bytes = f.total * f.esize;
  {
    PhaseScope phase(f.access, "MEMCPY_DEVICE_TO_HOST");
    RETURN_IF_ERROR(context(ops_->copy(f.staging, f.fused, bytes, gpu::CopyKind::kDeviceToHost, f.stream),
                            "copy to the staging buffer"));
  }
  for (size_t t = 0; t < f.responses.size(); ++t) {
    if (f.members[t].list.empty() && !f.filled) {
      fillIdentity(f.staging + f.offsets[t] * f.esize, f.responses[t]->first().length / f.esize, f.first.dtype,
                   f.ring_op);
    }
  }
  RETURN_IF_ERROR(f.access.dataPlane().allreduce(nodesOf(*f.responses.front(), f.access), f.staging, f.total,
                                                 f.first.dtype, f.ring_op));
  PhaseScope phase(f.access, "MEMCPY_HOST_TO_DEVICE");
  RETURN_IF_ERROR(context(ops_->copy(f.fused, f.staging, bytes, gpu::CopyKind::kHostToDevice, f.stream),
                          "copy from the staging buffer"));
  // The staging buffer is the job's: free for the next batch only once read.
  return ops_->waitStream(f.stream, "waiting for the copy from the staging buffer");
}

Status GpusAcrossDaemons::scatterFromFused(const FusedAllreduce& f) {
  // Back to every local rank, with the average and postscale.
  for (size_t t = 0; t < f.responses.size(); ++t) {
    if (f.members[t].list.empty()) continue;
    cuda::LocalReduceArgs scatter;
    scatter.dtype = static_cast<cuda::Dtype>(f.first.dtype);
    scatter.op = static_cast<cuda::Op>(f.first.op);
    scatter.inputs[0] = f.fused + f.offsets[t] * f.esize;
    scatter.num_inputs = 1;
    for (size_t k = 0; k < f.members[t].list.size(); ++k) scatter.outputs[k] = f.members[t].list[k].data;
    scatter.num_outputs = static_cast<int>(f.members[t].list.size());
    scatter.count = f.responses[t]->first().length / f.esize;
    scatter.postscale = f.first.postscale;
    scatter.average_divisor = static_cast<int>(f.responses[t]->ranks.size());
    RETURN_IF_ERROR(context(ops_->reduce(scatter, f.stream), "tensor '" + f.responses[t]->name + "'"));
  }
  return okStatus();
}

Status GpusAcrossDaemons::ncclBroadcast(const Response& r, RankAccess& access, const NodesComm& nodes,
                                        std::vector<Members> resolved) {
  // Between the communicator's GPUs of the nodes (it may hold none of the
  // ranks here: then its fusion buffer is the landing place); on the root's
  // node from the root's GPU to the others first, on the other nodes from
  // the communicator's GPU to the others after.
  ASSIGN_OR_RETURN(std::vector<Members> groups, withLead(std::move(resolved), nodes.comm->devices().front()));
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
    if (!sent.isOk()) sent = daemons_.fail(sent, access);
    RETURN_IF_ERROR(context(sent, "tensor '" + r.name + "'"));
    if (root_gpu <= 0 && groups.size() > 1) {
      RETURN_IF_ERROR(node_gpus_->acrossGpus(r, groups, landing, first.length, v1::SUM, 0, access));
    }
    return node_gpus_->copyFromLanding(r, groups, landing);
  }();
  return gpus_->recordDoneOnGpus(groups, waited, status);
}

Status GpusAcrossDaemons::broadcast(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(std::vector<Members> groups, gpus_->resolveByDevice(r, access));
  const Request& first = r.first();
  if (first.length > 0) {  // every node decides alike
    ASSIGN_OR_RETURN(NodesComm nodes, daemons_.forResponse(r, access, leadDevice(groups), v1::UINT8));
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

}  // namespace gradsync::executor
