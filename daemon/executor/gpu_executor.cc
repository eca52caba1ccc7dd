// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/gpu_executor.h"

#include <cuda_runtime_api.h>

#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/common/dtype.h"
#include "daemon/executor/executor_util.h"

namespace gradsync::executor {
namespace {

Status cudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return okStatus();
  return internalError(what + ": " + gpu::cudaErrorText(err));
}

}  // namespace

std::vector<ResponseResult> GpuExecutor::run(const fusion::FusedResponse& fused, RankAccess& access) {
  std::vector<ResponseResult> results;
  for (const auto& r : fused.responses) {
    if (!r.status.isOk()) {
      results.push_back(failed(r, r.status));
      continue;
    }
    const bool dataless = r.type == v1::BARRIER || r.type == v1::JOIN;
    if (access.multiNode() && !dataless) {
      results.push_back(failed(r, unimplemented("tensor '" + r.name + "': CUDA tensors in jobs across nodes are not " +
                                                "implemented yet (NCCL between daemons)")));
      continue;
    }
    switch (r.type) {
      case v1::ALLREDUCE: results.push_back(failed(r, allreduce(r, access))); break;
      case v1::BROADCAST: results.push_back(failed(r, broadcast(r, access))); break;
      case v1::BARRIER:
      case v1::JOIN: results.push_back(failed(r, okStatus())); break;
      default:
        results.push_back(failed(r, unimplemented("tensor '" + r.name + "': " + collectiveName(r.type) +
                                                  " of CUDA tensors is not implemented yet")));
    }
  }
  return results;
}

StatusOr<GpuExecutor::Members> GpuExecutor::resolve(const Response& r, RankAccess& access) {
  Members m;
  for (const auto& request : r.requests) {
    if (!request) continue;
    Member member;
    member.rank = request->rank;
    member.gpu = access.gpuOf(request->rank);
    if (!member.gpu || !request->cuda) {
      return failedPrecondition("tensor '" + r.name + "': rank " + std::to_string(request->rank) +
                                " has no GPU attached any more (it disconnected)");
    }
    ASSIGN_OR_RETURN(member.data, member.gpu->address(request->cuda->buffer_id, request->cuda->offset, request->length));
    member.slot = request->cuda->event_slot;
    RETURN_IF_ERROR(member.gpu->checkSlot(member.slot));
    if (m.device < 0) m.device = member.gpu->device();
    if (member.gpu->device() != m.device) {
      return unimplemented("tensor '" + r.name + "': the ranks on this node use several GPUs (" +
                           std::to_string(m.device) + " and " + std::to_string(member.gpu->device()) +
                           "); one GPU per node is supported so far");
    }
    m.list.push_back(std::move(member));
  }
  if (m.list.empty()) return invalidArgument("tensor '" + r.name + "': no rank contributes data");
  if (m.list.size() > static_cast<size_t>(cuda::kMaxLocalBuffers)) {
    return unimplemented("tensor '" + r.name + "': " + std::to_string(m.list.size()) + " ranks on one GPU (at most " +
                         std::to_string(cuda::kMaxLocalBuffers) + ")");
  }
  ASSIGN_OR_RETURN(cudaStream_t stream, backend_->stream(m.device));
  m.stream = stream;
  return m;
}

Status GpuExecutor::waitReady(const Members& m) {
  auto stream = static_cast<cudaStream_t>(m.stream);
  for (const auto& member : m.list) {
    auto event = static_cast<cudaEvent_t>(member.gpu->readyEvent(member.slot));
    RETURN_IF_ERROR(cudaStatus(cudaStreamWaitEvent(stream, event, 0),
                               "waiting for rank " + std::to_string(member.rank) + "'s ready event"));
  }
  return okStatus();
}

Status GpuExecutor::recordDone(const Members& m) {
  auto stream = static_cast<cudaStream_t>(m.stream);
  for (const auto& member : m.list) {
    auto event = static_cast<cudaEvent_t>(member.gpu->doneEvent(member.slot));
    RETURN_IF_ERROR(cudaStatus(cudaEventRecord(event, stream), "recording rank " + std::to_string(member.rank) +
                                                                   "'s done event"));
  }
  return okStatus();
}

Status GpuExecutor::allreduce(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(Members m, resolve(r, access));
  const Request& first = r.first();
  reduce::ReduceArgs check;
  check.dtype = first.dtype;
  check.op = first.op;
  check.num_inputs = check.num_outputs = static_cast<int>(m.list.size());
  check.prescale = first.prescale;
  check.postscale = first.postscale;
  check.average_divisor = static_cast<int>(r.ranks.size());
  RETURN_IF_ERROR(reduce::validateReduceArgs(check));
  cuda::LocalReduceArgs args;
  args.dtype = static_cast<cuda::Dtype>(first.dtype);
  args.op = static_cast<cuda::Op>(first.op);
  for (size_t k = 0; k < m.list.size(); ++k) {
    args.inputs[k] = m.list[k].data;
    args.outputs[k] = m.list[k].data;
  }
  args.num_inputs = args.num_outputs = static_cast<int>(m.list.size());
  args.count = first.length / elementSize(first.dtype);
  args.prescale = first.prescale;
  args.postscale = first.postscale;
  args.average_divisor = static_cast<int>(r.ranks.size());
  RETURN_IF_ERROR(waitReady(m));
  const std::string launched = cuda::launchLocalReduce(args, m.stream);
  if (!launched.empty()) return internalError("tensor '" + r.name + "': " + launched);
  return recordDone(m);
}

Status GpuExecutor::broadcast(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(Members m, resolve(r, access));
  const int root = r.first().root_rank;
  const uint8_t* source = nullptr;
  for (const auto& member : m.list) {
    if (member.rank == root) source = member.data;
  }
  if (source == nullptr) return failedPrecondition("tensor '" + r.name + "': broadcast root " + std::to_string(root) + " is not on this node");
  RETURN_IF_ERROR(waitReady(m));
  auto stream = static_cast<cudaStream_t>(m.stream);
  for (const auto& member : m.list) {
    if (member.data == source) continue;
    RETURN_IF_ERROR(cudaStatus(cudaMemcpyAsync(member.data, source, r.first().length, cudaMemcpyDeviceToDevice, stream),
                               "tensor '" + r.name + "': copy to rank " + std::to_string(member.rank)));
  }
  return recordDone(m);
}

}  // namespace gradsync::executor
