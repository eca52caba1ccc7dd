// SPDX-License-Identifier: Apache-2.0
// NodeGpus: allreduce and broadcast over several GPUs of one node, and the
// steps across them the other paths share. Each GPU's ranks are combined on
// that GPU (the local kernels), the GPUs through an NCCL communicator over
// them that the daemon holds whole (grouped calls, NVLink or PCIe as NCCL
// finds them), or through host memory where NCCL cannot (a dtype it lacks,
// no NCCL loaded, or after it failed for this job).
//
// Allgather and alltoall: each GPU packs its ranks' inputs into its block
// of a gathered buffer (every block as large as the largest GPU's share),
// the blocks go to every GPU (an NCCL allgather over the node's GPUs; host
// memory without NCCL or after it failed), and each rank's output is copied
// from its own GPU's buffer. Alltoall moves every input to every GPU this
// way: each GPU receives the whole exchange, not only its ranks' part
// (grouped sends and receives would move 1/G of it).
//
// Reducescatter: each GPU's ranks reduced there, the GPUs allreduced, each
// rank's rows from its GPU's buffer (an allreduce, where NCCL's
// reduce-scatter would move half the bytes between the GPUs).
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

namespace {

// Blocks start on this boundary (copies and NCCL run faster aligned).
constexpr size_t kBlockAlignment = 256;

}  // namespace

ResponseResult NodeGpus::gatherLike(const Response& r, const std::vector<Members>& groups, RankAccess& access) {
  ResponseResult result = failed(r, okStatus());
  const std::vector<uint64_t> out_bytes = gatheredBytes(r, &result);
  // Each GPU's block holds its members' inputs end to end, in member order;
  // at[i]: where request i's input lies in every GPU's gathered buffer.
  std::vector<std::vector<size_t>> index;
  std::vector<size_t> at(r.requests.size(), 0);
  size_t block = 0;
  for (const auto& group : groups) {
    index.push_back(JobGpus::memberIndices(r, group));
    size_t used = 0;
    for (size_t i : index.back()) {
      at[i] = used;
      used += r.requests[i]->length;
    }
    block = std::max(block, used);
  }
  block = (block + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i : index[g]) at[i] += g * block;
  }
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  Status status = [&]() -> Status {
    for (size_t g = 0; g < groups.size(); ++g) {
      RETURN_IF_ERROR(JobGpus::checkOutputs(r, groups[g], JobGpus::localBytes(groups[g], index[g], out_bytes)));
    }
    std::vector<void*> gathered;
    for (const auto& group : groups) {
      ASSIGN_OR_RETURN(gpu::GrowingBuffer * buffer, gpus_->fusionFor(group.device));
      ASSIGN_OR_RETURN(uint8_t * data, buffer->reserve(std::max<size_t>(block * groups.size(), 1)));
      gathered.push_back(data);
    }
    for (size_t g = 0; g < groups.size(); ++g) {  // each GPU's ranks into its block
      RETURN_IF_ERROR(ops_->select(groups[g].device));
      RETURN_IF_ERROR(gpus_->waitReady(groups[g]));
      ++waited;
      for (size_t k = 0; k < groups[g].list.size(); ++k) {
        const size_t i = index[g][k];
        if (r.requests[i]->length == 0) continue;
        RETURN_IF_ERROR(
            context(ops_->copy(static_cast<uint8_t*>(gathered[g]) + at[i], groups[g].list[k].data,
                               r.requests[i]->length, gpu::CopyKind::kDeviceToDevice, groups[g].stream),
                    "tensor '" + r.name + "': copy of rank " + std::to_string(groups[g].list[k].rank) + "'s input"));
      }
    }
    if (block > 0) RETURN_IF_ERROR(gatherAcrossGpus(r, groups, gathered, block, access));
    for (size_t g = 0; g < groups.size(); ++g) {
      RETURN_IF_ERROR(ops_->select(groups[g].device));
      RETURN_IF_ERROR(copyFromGathered(r, groups[g], index[g], at, static_cast<const uint8_t*>(gathered[g])));
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return status.isOk() ? result : failed(r, status);
}

Status NodeGpus::copyFromGathered(const Response& r, const Members& m, const std::vector<size_t>& index,
                                  const std::vector<size_t>& at, const uint8_t* gathered) {
  const size_t row = rowBytes(r.first());
  for (size_t k = 0; k < m.list.size(); ++k) {
    const size_t j = index[k];  // this member's request
    size_t written = 0;
    for (size_t i = 0; i < r.requests.size(); ++i) {
      size_t from = at[i], length = r.requests[i]->length;  // allgather: all of input i
      if (r.type == v1::ALLTOALL) {                         // alltoall: input i's split j
        const auto& splits = r.requests[i]->splits;
        for (size_t s = 0; s < j; ++s) from += splits[s] * row;
        length = splits[j] * row;
      }
      if (length > 0) {
        RETURN_IF_ERROR(context(
            ops_->copy(m.list[k].output + written, gathered + from, length, gpu::CopyKind::kDeviceToDevice, m.stream),
            "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[k].rank)));
      }
      written += length;
    }
  }
  return okStatus();
}

Status NodeGpus::gatherAcrossGpus(const Response& r, const std::vector<Members>& groups,
                                  const std::vector<void*>& buffers, size_t block, RankAccess& access) {
  std::vector<int> devices;
  std::vector<void*> streams;
  for (const auto& group : groups) {
    devices.push_back(group.device);
    streams.push_back(group.stream);
  }
  ASSIGN_OR_RETURN(gpu::NcclComm * comm, comms_.over(devices, v1::UINT8));
  if (comm == nullptr) return gatherAcrossGpusOnHost(r, groups, buffers, block);
  PhaseScope phase(access, "NCCL_ALLGATHER");
  Status status = comm->allGather(buffers, block, streams, gpu::kStreamWaitLimit);
  if (!status.isOk()) comms_.fail();  // aborted: the rest of the job goes through host memory
  return context(status, "tensor '" + r.name + "'");
}

Status NodeGpus::gatherAcrossGpusOnHost(const Response& r, const std::vector<Members>& groups,
                                        const std::vector<void*>& buffers, size_t block) {
  // A copy to pageable memory blocks the host until the stream reaches it:
  // bound the wait first.
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the local work"));
  const size_t n = groups.size();
  uint8_t* host = gpus_->staging(block * n);
  for (size_t g = 0; g < n; ++g) {
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    RETURN_IF_ERROR(context(ops_->copy(host + block * g, static_cast<uint8_t*>(buffers[g]) + block * g, block,
                                       gpu::CopyKind::kDeviceToHost, groups[g].stream),
                            "tensor '" + r.name + "': copy to host memory"));
  }
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the copies"));
  for (size_t g = 0; g < n; ++g) {  // the other GPUs' blocks: those before this one's, then those after
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    auto* buffer = static_cast<uint8_t*>(buffers[g]);
    for (const auto& [from, bytes] :
         {std::pair<size_t, size_t>{0, block * g}, {block * (g + 1), block * (n - g - 1)}}) {
      if (bytes == 0) continue;
      RETURN_IF_ERROR(
          context(ops_->copy(buffer + from, host + from, bytes, gpu::CopyKind::kHostToDevice, groups[g].stream),
                  "tensor '" + r.name + "': copy from host memory"));
    }
  }
  // The staging buffer is the job's: free for the next batch only once read.
  for (const auto& group : groups) RETURN_IF_ERROR(ops_->waitStream(group.stream, "waiting for the copies back"));
  return okStatus();
}

ResponseResult NodeGpus::reducescatter(const Response& r, const std::vector<Members>& groups, RankAccess& access) {
  const Request& first = r.first();
  if (Status valid = checkReduction(r.name, first); !valid.isOk()) return failed(r, valid);
  const std::vector<int64_t> rows = reducescatterRows(r);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  const ReduceOp across = first.op == v1::AVERAGE ? v1::SUM : first.op;  // the average comes last
  size_t waited = 0;
  Status status = [&]() -> Status {
    ASSIGN_OR_RETURN(const std::vector<std::vector<size_t>> index, JobGpus::checkedIndices(r, groups, layout.bytes));
    if (first.length == 0) return okStatus();
    ASSIGN_OR_RETURN(std::vector<void*> fused, reduceEachGpu(r, groups, across, &waited));
    RETURN_IF_ERROR(acrossGpus(r, groups, fused, first.length, across, -1, access));
    for (size_t g = 0; g < groups.size(); ++g) {  // each rank's rows, with the average and postscale
      RETURN_IF_ERROR(ops_->select(groups[g].device));
      RETURN_IF_ERROR(scatterRows(r, groups[g], index[g], rows, static_cast<const uint8_t*>(fused[g])));
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return status.isOk() ? result : failed(r, status);
}

StatusOr<std::vector<void*>> NodeGpus::reduceEachGpu(const Response& r, const std::vector<Members>& groups, ReduceOp op,
                                                     size_t* waited) {
  std::vector<void*> fused;
  for (const auto& group : groups) {
    ASSIGN_OR_RETURN(gpu::GrowingBuffer * buffer, gpus_->fusionFor(group.device));
    ASSIGN_OR_RETURN(uint8_t * data, buffer->reserve(r.first().length));
    fused.push_back(data);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    RETURN_IF_ERROR(ops_->select(groups[g].device));  // a kernel goes to the current device's streams
    RETURN_IF_ERROR(gpus_->waitReady(groups[g]));
    ++*waited;
    if (!groups[g].list.empty()) RETURN_IF_ERROR(reduceOnGpu(r, groups[g], fused[g], op));
  }
  return fused;
}

Status NodeGpus::reduceOnGpu(const Response& r, const Members& group, void* out, ReduceOp op) {
  const Request& first = r.first();
  cuda::LocalReduceArgs gather;
  gather.dtype = static_cast<cuda::Dtype>(first.dtype);
  gather.op = static_cast<cuda::Op>(op);
  for (size_t k = 0; k < group.list.size(); ++k) gather.inputs[k] = group.list[k].data;
  gather.num_inputs = static_cast<int>(group.list.size());
  gather.outputs[0] = out;
  gather.num_outputs = 1;
  gather.count = first.length / elementSize(first.dtype);
  gather.prescale = first.prescale;
  return context(ops_->reduce(gather, group.stream), "tensor '" + r.name + "'");
}

}  // namespace gradsync::executor
