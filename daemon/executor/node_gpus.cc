// SPDX-License-Identifier: Apache-2.0
// NodeGpus: allreduce and broadcast over several GPUs of one node, and the
// steps across them the other paths share. Each GPU's ranks are combined on
// that GPU (the local kernels), the GPUs through an NCCL communicator over
// them that the daemon holds whole (grouped calls, NVLink or PCIe as NCCL
// finds them), or through host memory where NCCL cannot (a dtype it lacks,
// no NCCL loaded, or after it failed for this job).
#include "daemon/executor/node_gpus.h"

#include <algorithm>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"

namespace gradsync::executor {

Status NodeGpus::allreduce(const Response& r, const std::vector<Members>& groups, RankAccess& access) {
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
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  timer.finish();
  return status;
}

Status NodeGpus::broadcast(const Response& r, const std::vector<Members>& groups, RankAccess& access) {
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
    RETURN_IF_ERROR(gpus_->waitReadyOnGpus(groups, &waited));
    RETURN_IF_ERROR(acrossGpus(r, groups, landing, first.length, v1::SUM, root, access));
    return copyFromLanding(r, groups, landing);  // then to each rank on that GPU
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return status;
}

Status NodeGpus::acrossGpus(const Response& r, const std::vector<Members>& groups, const std::vector<void*>& buffers,
                            size_t bytes, ReduceOp op, int root, RankAccess& access) {
  std::vector<int> devices;
  std::vector<void*> streams;
  for (const auto& group : groups) {
    devices.push_back(group.device);
    streams.push_back(group.stream);
  }
  const DataType dtype = root >= 0 ? v1::UINT8 : r.first().dtype;
  ASSIGN_OR_RETURN(gpu::NcclComm * comm, comms_.over(devices, dtype));
  if (comm == nullptr) return acrossGpusOnHost(r, groups, buffers, bytes, op, root);
  PhaseScope phase(access, root >= 0 ? "NCCL_BROADCAST" : "NCCL_ALLREDUCE");
  Status status = root >= 0
                      ? comm->broadcast(buffers, bytes, root, streams, gpu::kStreamWaitLimit)
                      : comm->allReduce(buffers, bytes / elementSize(dtype), dtype, op, streams, gpu::kStreamWaitLimit);
  if (!status.isOk()) comms_.fail();  // aborted: the rest of the job goes through host memory
  return context(status, "tensor '" + r.name + "'");
}

Status NodeGpus::acrossGpusOnHost(const Response& r, const std::vector<Members>& groups,
                                  const std::vector<void*>& buffers, size_t bytes, ReduceOp op, int root) {
  // A copy to pageable memory blocks the host until the stream reaches it:
  // bound the wait first.
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the local work"));
  const size_t n = groups.size();
  uint8_t* host = gpus_->staging(bytes * n);
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

Status NodeGpus::copyFromLanding(const Response& r, const std::vector<Members>& groups,
                                 const std::vector<void*>& landing) {
  const size_t bytes = r.first().length;
  for (size_t g = 0; g < groups.size(); ++g) {
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    for (const auto& member : groups[g].list) {
      if (member.data == landing[g]) continue;
      RETURN_IF_ERROR(
          context(ops_->copy(member.data, landing[g], bytes, gpu::CopyKind::kDeviceToDevice, groups[g].stream),
                  "tensor '" + r.name + "': copy to rank " + std::to_string(member.rank)));
    }
  }
  return okStatus();
}

Status NodeGpus::scatterRows(const Response& r, const Members& m, const std::vector<size_t>& index,
                             const std::vector<int64_t>& rows, const uint8_t* fused) {
  const Request& first = r.first();
  const size_t row = rowBytes(first);
  std::vector<size_t> start_row(rows.size(), 0);
  for (size_t j = 1; j < rows.size(); ++j) start_row[j] = start_row[j - 1] + rows[j - 1];
  for (size_t k = 0; k < m.list.size(); ++k) {
    const size_t j = index[k];
    if (rows[j] == 0) continue;
    cuda::LocalReduceArgs scatter;
    scatter.dtype = static_cast<cuda::Dtype>(first.dtype);
    scatter.op = static_cast<cuda::Op>(first.op);
    scatter.inputs[0] = fused + start_row[j] * row;
    scatter.num_inputs = 1;
    scatter.outputs[0] = m.list[k].output;
    scatter.num_outputs = 1;
    scatter.count = rows[j] * row / elementSize(first.dtype);
    scatter.postscale = first.postscale;
    scatter.average_divisor = static_cast<int>(r.ranks.size());
    RETURN_IF_ERROR(context(ops_->reduce(scatter, m.stream), "tensor '" + r.name + "'"));
  }
  return okStatus();
}

}  // namespace gradsync::executor
