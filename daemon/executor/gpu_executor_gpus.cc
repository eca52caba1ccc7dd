// SPDX-License-Identifier: Apache-2.0
// GpuExecutor over several GPUs of one node: each GPU's ranks are combined
// on that GPU (the local kernels), the GPUs through an NCCL communicator
// over them that the daemon holds whole (grouped calls, NVLink or PCIe as
// NCCL finds them), or through host memory where NCCL cannot (a dtype it
// lacks, no NCCL loaded, or after it failed for this job).
#include <algorithm>
#include <set>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"

namespace gradsync::executor {

Status GpuExecutor::multiGpuAllreduce(const Response& r, const std::vector<Members>& groups, RankAccess& access) {
  const Request& first = r.first();
  if (first.length == 0) return okStatus();
  const size_t esize = elementSize(first.dtype);
  const size_t count = first.length / esize;
  const ReduceOp across = first.op == v1::AVERAGE ? v1::SUM : first.op;  // the average comes last
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  // The GPU phases as the first GPU's stream runs them (every GPU's are alike).
  GpuPhaseTimer timer(ops_, access, groups.front().device, groups.front().stream);
  Status status = [&]() -> Status {
    timer.begin("GPU_REDUCE");
    ASSIGN_OR_RETURN(std::vector<void*> fused, reduceEachGpu(r, groups, across, &waited));
    timer.end();
    timer.begin("GPU_NCCL_ALLREDUCE");
    RETURN_IF_ERROR(acrossGpus(r, groups, fused, first.length, across, -1, access));
    timer.end();
    timer.begin("GPU_COPY");
    for (size_t g = 0; g < groups.size(); ++g) {  // back to every rank, with the average and postscale
      RETURN_IF_ERROR(ops_->select(groups[g].device));
      cuda::LocalReduceArgs scatter;
      scatter.dtype = static_cast<cuda::Dtype>(first.dtype);
      scatter.op = static_cast<cuda::Op>(first.op);
      scatter.inputs[0] = fused[g];
      scatter.num_inputs = 1;
      for (size_t k = 0; k < groups[g].list.size(); ++k) scatter.outputs[k] = groups[g].list[k].data;
      scatter.num_outputs = static_cast<int>(groups[g].list.size());
      scatter.count = count;
      scatter.postscale = first.postscale;
      scatter.average_divisor = static_cast<int>(r.ranks.size());
      RETURN_IF_ERROR(context(ops_->reduce(scatter, groups[g].stream), "tensor '" + r.name + "'"));
    }
    timer.end();
    return okStatus();
  }();
  status = gpus_.recordDoneOnGpus(groups, waited, status);
  timer.finish();
  return status;
}

Status GpuExecutor::multiGpuBroadcast(const Response& r, const std::vector<Members>& groups, RankAccess& access) {
  const Request& first = r.first();
  if (first.length == 0) return okStatus();
  int root = -1;               // the root's GPU, as an index into groups
  std::vector<void*> landing;  // where each GPU receives: the root's tensor there, the first rank's elsewhere
  for (size_t g = 0; g < groups.size(); ++g) {
    landing.push_back(groups[g].list.front().data);
    for (const auto& member : groups[g].list) {
      if (member.rank != first.root_rank) continue;
      root = static_cast<int>(g);
      landing.back() = member.data;
    }
  }
  if (root < 0) {
    return failedPrecondition("tensor '" + r.name + "': broadcast root " + std::to_string(first.root_rank) +
                              " is not on this node");
  }
  size_t waited = 0;
  Status status = [&]() -> Status {
    RETURN_IF_ERROR(gpus_.waitReadyOnGpus(groups, &waited));
    RETURN_IF_ERROR(acrossGpus(r, groups, landing, first.length, v1::SUM, root, access));
    return copyFromLanding(r, groups, landing);  // then to each rank on that GPU
  }();
  status = gpus_.recordDoneOnGpus(groups, waited, status);
  return status;
}

Status GpuExecutor::acrossGpus(const Response& r, const std::vector<Members>& groups, const std::vector<void*>& buffers,
                               size_t bytes, ReduceOp op, int root, RankAccess& access) {
  std::vector<int> devices;
  std::vector<void*> streams;
  for (const auto& group : groups) {
    devices.push_back(group.device);
    streams.push_back(group.stream);
  }
  const DataType dtype = root >= 0 ? v1::UINT8 : r.first().dtype;
  ASSIGN_OR_RETURN(gpu::NcclComm * comm, gpu_comms_.over(devices, dtype));
  if (comm == nullptr) return acrossGpusOnHost(r, groups, buffers, bytes, op, root);
  PhaseScope phase(access, root >= 0 ? "NCCL_BROADCAST" : "NCCL_ALLREDUCE");
  Status status = root >= 0
                      ? comm->broadcast(buffers, bytes, root, streams, gpu::kStreamWaitLimit)
                      : comm->allReduce(buffers, bytes / elementSize(dtype), dtype, op, streams, gpu::kStreamWaitLimit);
  if (!status.isOk()) gpu_comms_.fail();  // aborted: the rest of the job goes through host memory
  return context(status, "tensor '" + r.name + "'");
}

Status GpuExecutor::acrossGpusOnHost(const Response& r, const std::vector<Members>& groups,
                                     const std::vector<void*>& buffers, size_t bytes, ReduceOp op, int root) {
  // A copy to pageable memory blocks the host until the stream reaches it:
  // bound the wait first.
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the local work"));
  const size_t n = groups.size();
  uint8_t* host = gpus_.staging(bytes * n);
  std::vector<const void*> inputs;
  for (size_t g = 0; g < n; ++g) {
    if (root >= 0 && static_cast<int>(g) != root) continue;
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    RETURN_IF_ERROR(
        context(ops_->copy(host + bytes * g, buffers[g], bytes, gpu::CopyKind::kDeviceToHost, groups[g].stream),
                "tensor '" + r.name + "': copy to host memory"));
    inputs.push_back(host + bytes * g);
  }
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the copies"));
  uint8_t* result = host + bytes * static_cast<size_t>(std::max(root, 0));
  if (root < 0) {
    void* outputs[1] = {result};
    reduce::ReduceArgs args;
    args.dtype = r.first().dtype;
    args.op = op;
    args.inputs = inputs.data();
    args.num_inputs = static_cast<int>(inputs.size());
    args.outputs = outputs;
    args.num_outputs = 1;
    RETURN_IF_ERROR(context(reduce::validateReduceArgs(args), "tensor '" + r.name + "'"));
    reduce::reduceRange(args, 0, bytes / elementSize(args.dtype));
  }
  for (size_t g = 0; g < n; ++g) {
    if (static_cast<int>(g) == root) continue;
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    RETURN_IF_ERROR(context(ops_->copy(buffers[g], result, bytes, gpu::CopyKind::kHostToDevice, groups[g].stream),
                            "tensor '" + r.name + "': copy from host memory"));
  }
  // The staging buffer is the job's: free for the next batch only once read.
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the copies back"));
  return okStatus();
}

Status GpuExecutor::fillIdentitiesOnDevice(const FusedAllreduce& f) {
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

StatusOr<std::vector<GpuExecutor::FusedAllreduce>> GpuExecutor::viewsByGpu(
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
    ASSIGN_OR_RETURN(f.stream, gpus_.streamFor(device));
    ASSIGN_OR_RETURN(gpu::GrowingBuffer * fusion, gpus_.fusionFor(device));
    ASSIGN_OR_RETURN(f.fused, fusion->reserve(f.total * f.esize));
    f.filled = true;
    per_gpu.push_back(std::move(f));
  }
  return per_gpu;
}

Status GpuExecutor::multiGpuStagedAllreduce(const std::vector<const Response*>& responses, RankAccess& access,
                                            std::vector<std::vector<Members>> groups, const std::vector<int>& devices,
                                            gpu::NcclComm* comm) {
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
      f.staging = gpus_.staging(bytes);
      RETURN_IF_ERROR(fillIdentitiesOnDevice(f));
    }
    RETURN_IF_ERROR(acrossGpus(head, gpus, fused, bytes, ring_op, -1, access));
    // The first GPU's buffer among the nodes, as with one GPU here.
    FusedAllreduce& lead = per_gpu.front();
    RETURN_IF_ERROR(ops_->select(devices.front()));
    lead.staging = gpus_.staging(bytes);
    RETURN_IF_ERROR(comm != nullptr ? ncclAcrossNodes(lead, comm) : stagedAcrossNodes(lead));
    RETURN_IF_ERROR(acrossGpus(head, gpus, fused, bytes, ring_op, 0, access));
    for (size_t i = 0; i < per_gpu.size(); ++i) {
      RETURN_IF_ERROR(ops_->select(devices[i]));
      RETURN_IF_ERROR(scatterFromFused(per_gpu[i]));
    }
    return okStatus();
  }();
  for (const Members* m : waited) {
    (void)ops_->select(m->device);
    status = gpus_.recordDoneAfter(*m, status);
  }
  return status;
}

}  // namespace gradsync::executor
