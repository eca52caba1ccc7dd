// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/allreduce_across_daemons.h"

#include <algorithm>
#include <set>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"

namespace gradsync::executor {

Status AllreduceAcrossDaemons::allreduce(const std::vector<const Response*>& responses, RankAccess& access) {
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
  const int lead = daemons_->active() ? daemons_->device() : devices.empty() ? 0 : *devices.begin();
  ASSIGN_OR_RETURN(NodesComm nodes, daemons_->forResponse(*responses.front(), access, lead, first.dtype));
  if (nodes.outside) return okStatus();  // a process set with no rank here
  gpu::NcclComm* comm = nodes.comm;
  // The GPU of the daemons' communicator takes part (with identities where
  // no local rank uses it) and leads: the communicator stays on the GPU it
  // was formed on, whichever GPUs a batch's ranks use.
  if (comm != nullptr && !devices.empty()) devices.insert(daemons_->device());
  if (devices.size() > 1) {
    std::vector<int> ordered(devices.begin(), devices.end());
    const int first_device = comm != nullptr ? daemons_->device() : ordered.front();
    std::rotate(ordered.begin(), std::find(ordered.begin(), ordered.end(), first_device),
                std::find(ordered.begin(), ordered.end(), first_device) + 1);
    return multiGpuStagedAllreduce(responses, access, std::move(groups), ordered, comm);
  }
  return oneGpuAllreduce(f, groups, devices.empty() ? -1 : *devices.begin(), comm);
}

Status AllreduceAcrossDaemons::oneGpuAllreduce(FusedAllreduce& f, std::vector<std::vector<Members>>& groups, int device,
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
  if (device < 0) device = daemons_->device();
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

Status AllreduceAcrossDaemons::reduceAcrossNodesAndBack(const FusedAllreduce& f, gpu::NcclComm* comm,
                                                        GpuPhaseTimer& timer, std::vector<const Members*>* waited) {
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

Status AllreduceAcrossDaemons::reduceIntoFused(const FusedAllreduce& f, std::vector<const Members*>* waited) {
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

Status AllreduceAcrossDaemons::ncclAcrossNodes(const FusedAllreduce& f, gpu::NcclComm* comm) {
  if (!f.filled) RETURN_IF_ERROR(fillIdentitiesOnDevice(f));  // where no local rank contributes
  // allReduce waits for the stream: the phase covers the local reduction too.
  PhaseScope phase(f.access, "NCCL_ALLREDUCE");
  Status reduced =
      comm->allReduce({f.fused}, f.total, f.first.dtype, f.ring_op, {f.stream}, DaemonComms::waitFor(f.access));
  if (!reduced.isOk()) reduced = daemons_->fail(reduced, f.access);
  return reduced;
}

Status AllreduceAcrossDaemons::stagedAcrossNodes(const FusedAllreduce& f) {
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

Status AllreduceAcrossDaemons::scatterFromFused(const FusedAllreduce& f) {
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

StatusOr<std::vector<AllreduceAcrossDaemons::FusedAllreduce>> AllreduceAcrossDaemons::viewsByGpu(
    const std::vector<const Response*>& responses, RankAccess& access, std::vector<std::vector<Members>>& groups,
    const std::vector<int>& devices) {
  const Request& first = responses.front()->first();
  const ReduceOp ring_op = first.op == v1::AVERAGE ? v1::SUM : first.op;
  std::vector<FusedAllreduce> per_gpu;
  for (int device : devices) {
    FusedAllreduce f{responses, access, first, elementSize(first.dtype), ring_op};
    for (size_t t = 0; t < responses.size(); ++t) {
      Members mine;
      for (auto& group : groups[t]) {
        if (group.device == device) mine = std::move(group);
      }
      if (responses[t]->first().length == 0) mine.list.clear();
      f.offsets.push_back(f.total);
      f.total += responses[t]->first().length / f.esize;
      f.members.push_back(std::move(mine));
    }
    ASSIGN_OR_RETURN(f.stream, gpus_->streamFor(device));
    ASSIGN_OR_RETURN(gpu::GrowingBuffer * fusion, gpus_->fusionFor(device));
    ASSIGN_OR_RETURN(f.fused, fusion->reserve(f.total * f.esize));
    f.filled = true;
    per_gpu.push_back(std::move(f));
  }
  return per_gpu;
}

Status AllreduceAcrossDaemons::fillIdentitiesOnDevice(const FusedAllreduce& f) {
  bool waited = false;
  for (size_t t = 0; t < f.responses.size(); ++t) {
    const size_t bytes = f.responses[t]->first().length;
    if (!f.members[t].list.empty() || bytes == 0) continue;
    if (!waited) {  // a copy from pageable memory waits for the stream: bound it first
      RETURN_IF_ERROR(ops_->waitStream(f.stream, "waiting for the local reduction"));
      waited = true;
    }
    uint8_t* host = f.staging + f.offsets[t] * f.esize;
    fillIdentity(host, bytes / f.esize, f.first.dtype, f.ring_op);
    RETURN_IF_ERROR(
        context(ops_->copy(f.fused + f.offsets[t] * f.esize, host, bytes, gpu::CopyKind::kHostToDevice, f.stream),
                "identity values to the fusion buffer"));
  }
  // The staging buffer is read before the next GPU's identities go there.
  return waited ? ops_->waitStream(f.stream, "waiting for the identity values") : okStatus();
}

Status AllreduceAcrossDaemons::multiGpuStagedAllreduce(const std::vector<const Response*>& responses,
                                                       RankAccess& access, std::vector<std::vector<Members>> groups,
                                                       const std::vector<int>& devices, gpu::NcclComm* comm) {
  const ReduceOp ring_op = responses.front()->first().op == v1::AVERAGE ? v1::SUM : responses.front()->first().op;
  ASSIGN_OR_RETURN(std::vector<FusedAllreduce> per_gpu, viewsByGpu(responses, access, groups, devices));
  const size_t bytes = per_gpu.front().total * per_gpu.front().esize;
  std::vector<const Members*> waited;  // their done events are recorded whatever happens next
  std::vector<Members> gpus;           // each GPU as a group without members: its device and stream
  std::vector<void*> fused;
  for (size_t i = 0; i < devices.size(); ++i) {
    gpus.emplace_back();
    gpus.back().device = devices[i];
    gpus.back().stream = per_gpu[i].stream;
    fused.push_back(per_gpu[i].fused);
  }
  const Response& head = *responses.front();
  Status status = [&]() -> Status {
    for (size_t i = 0; i < per_gpu.size(); ++i) {  // each GPU's ranks, identities where it has none
      FusedAllreduce& f = per_gpu[i];
      RETURN_IF_ERROR(ops_->select(devices[i]));
      RETURN_IF_ERROR(reduceIntoFused(f, &waited));
      f.staging = gpus_->staging(bytes);
      RETURN_IF_ERROR(fillIdentitiesOnDevice(f));
    }
    RETURN_IF_ERROR(node_gpus_->acrossGpus(head, gpus, fused, bytes, ring_op, -1, access));
    // The first GPU's buffer among the nodes, as with one GPU here.
    FusedAllreduce& lead = per_gpu.front();
    RETURN_IF_ERROR(ops_->select(devices.front()));
    lead.staging = gpus_->staging(bytes);
    RETURN_IF_ERROR(comm != nullptr ? ncclAcrossNodes(lead, comm) : stagedAcrossNodes(lead));
    RETURN_IF_ERROR(node_gpus_->acrossGpus(head, gpus, fused, bytes, ring_op, 0, access));
    for (size_t i = 0; i < per_gpu.size(); ++i) {
      RETURN_IF_ERROR(ops_->select(devices[i]));
      RETURN_IF_ERROR(scatterFromFused(per_gpu[i]));
    }
    return okStatus();
  }();
  for (const Members* m : waited) {
    (void)ops_->select(m->device);
    status = gpus_->recordDoneAfter(*m, status);
  }
  return status;
}

}  // namespace gradsync::executor
