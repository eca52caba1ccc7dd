// SPDX-License-Identifier: Apache-2.0
// GpuExecutor: its resources, and the collectives among the ranks of one
// node (the paths across nodes are in gpu_executor_cross.cc).
#include "daemon/executor/gpu_executor.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"

namespace gradsync::executor {

GpuExecutor::~GpuExecutor() {
  fusion_.clear();  // freed in stream order, before the streams go
  for (const auto& [device, stream] : streams_) {
    const Status released = ops_->releaseStream(device, stream);
    if (!released.isOk())
      GS_LOG(gpu, err, "a job's stream on device {} left undestroyed: {}", device, released.message());
  }
}

StatusOr<void*> GpuExecutor::streamFor(int device) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  ASSIGN_OR_RETURN(void* stream, ops_->newStream(device));
  streams_[device] = stream;
  return stream;
}

StatusOr<gpu::GrowingBuffer*> GpuExecutor::fusionFor(int device) {
  auto& buffer = fusion_[device];
  if (!buffer) {
    ASSIGN_OR_RETURN(void* stream, streamFor(device));
    buffer = std::make_unique<gpu::GrowingBuffer>(ops_, device, stream);
  }
  return buffer.get();
}

uint8_t* GpuExecutor::staging(size_t bytes) {
  if (staging_.size() < bytes) staging_.resize(bytes);
  return staging_.data();
}

std::vector<ResponseResult> GpuExecutor::run(const fusion::FusedResponse& fused, RankAccess& access) {
  std::vector<ResponseResult> results;
  const Response& head = fused.responses.front();
  if (head.status.isOk() && head.type == v1::ALLREDUCE && head.first().op == v1::ADASUM) {
    for (const auto& r : fused.responses) results.push_back(adasumAllreduce(r, access));  // one op per bucket
    return results;
  }
  if (access.dataPlane().multiNode() && head.status.isOk() && head.type == v1::ALLREDUCE) {
    return allWith(fused, stagedAllreduce(responsesOf(fused), access));
  }
  for (const auto& r : fused.responses) results.push_back(r.status.isOk() ? runOne(r, access) : failed(r, r.status));
  return results;
}

ResponseResult GpuExecutor::runOne(const Response& r, RankAccess& access) {
  const bool multi_node = access.dataPlane().multiNode();
  switch (r.type) {
    case v1::ALLREDUCE:
      return failed(r, allreduce(r, access));
    case v1::BROADCAST:
      return failed(r, multi_node ? stagedBroadcast(r, access) : broadcast(r, access));
    case v1::BARRIER:
    case v1::JOIN:
    case v1::PROCESS_SET_ADD:
    case v1::PROCESS_SET_REMOVE:
      return failed(r, okStatus());
    case v1::ALLGATHER:
      return multi_node ? stagedGatherLike(r, access) : allgather(r, access);
    case v1::ALLTOALL:
      return multi_node ? stagedGatherLike(r, access) : alltoall(r, access);
    case v1::REDUCESCATTER:
      return multi_node ? stagedReducescatter(r, access) : reducescatter(r, access);
    default:
      return failed(r, unimplemented("tensor '" + r.name + "': " + collectiveName(r.type) +
                                     " of CUDA tensors is not implemented yet"));
  }
}

StatusOr<std::vector<GpuExecutor::Members>> GpuExecutor::resolveByDevice(const Response& r, RankAccess& access) {
  std::map<int, Members> by_device;
  std::vector<Member> without_memory;
  for (const auto& request : r.requests) {
    if (!request || !access.isLocal(request->rank)) continue;
    Member member;
    member.rank = request->rank;
    member.gpu = access.gpuOf(request->rank);
    const bool no_output =
        !request->cuda_output || (request->cuda_output->buffer_id == gpu::kNoBuffer && request->output_length == 0);
    const bool empty = request->cuda && request->cuda->buffer_id == gpu::kNoBuffer &&
                       request->cuda->event_slot == gpu::kNoEventSlot && request->length == 0 && no_output;
    if (empty) {  // no elements, no events: nothing of this rank's to touch
      member.slot = gpu::kNoEventSlot;
      without_memory.push_back(std::move(member));
      continue;
    }
    if (!member.gpu || !request->cuda) {
      return failedPrecondition("tensor '" + r.name + "': rank " + std::to_string(request->rank) +
                                " has no GPU attached any more (it disconnected)");
    }
    ASSIGN_OR_RETURN(gpu::Located input,
                     member.gpu->locate(request->cuda->buffer_id, request->cuda->offset, request->length));
    member.data = input.data;
    member.data_mapping = std::move(input.mapping);
    member.slot = request->cuda->event_slot;
    if (request->cuda_output) {
      ASSIGN_OR_RETURN(gpu::Located output, member.gpu->locate(request->cuda_output->buffer_id,
                                                               request->cuda_output->offset, request->output_length));
      member.output = output.data;
      member.output_mapping = std::move(output.mapping);
      member.output_length = request->output_length;
    }
    RETURN_IF_ERROR(member.gpu->checkSlot(member.slot));
    Members& group = by_device[member.gpu->device()];
    group.device = member.gpu->device();
    group.list.push_back(std::move(member));
  }
  std::vector<Members> groups;
  for (auto& [device, group] : by_device) {
    if (group.list.size() > static_cast<size_t>(cuda::kMaxLocalBuffers)) {
      return unimplemented("tensor '" + r.name + "': " + std::to_string(group.list.size()) +
                           " ranks on one GPU (at most " + std::to_string(cuda::kMaxLocalBuffers) + ")");
    }
    ASSIGN_OR_RETURN(group.stream, streamFor(device));
    groups.push_back(std::move(group));
  }
  if (!without_memory.empty()) {
    if (groups.empty()) groups.emplace_back();
    for (auto& member : without_memory) groups.front().list.push_back(std::move(member));
  }
  if (!groups.empty() && groups.front().device >= 0) RETURN_IF_ERROR(ops_->select(groups.front().device));
  return groups;
}

Status GpuExecutor::waitReadyOnGpus(const std::vector<Members>& groups, size_t* waited) {
  for (const auto& group : groups) {
    if (group.device >= 0) RETURN_IF_ERROR(ops_->select(group.device));
    RETURN_IF_ERROR(waitReady(group));
    ++*waited;
  }
  return okStatus();
}

Status GpuExecutor::waitReady(const Members& m) {
  // On the host, not on the stream: a stream told to wait for the event of a
  // client that dies before reaching it would never run again, and every
  // other rank's done event behind it would never come.
  for (const auto& member : m.list) {
    if (member.slot == gpu::kNoEventSlot) continue;
    RETURN_IF_ERROR(waitForEvent(*member.gpu, member.gpu->readyEvent(member.slot)));
  }
  return okStatus();
}

Status GpuExecutor::waitForEvent(const gpu::ClientGpu& client, void* event) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    StatusOr<bool> done = ops_->eventDone(event);
    if (!done.isOk()) return context(done.status(), "querying " + client.who() + "'s ready event");
    if (*done) return okStatus();
    if (!client.attached()) {
      return unavailable(client.who() + " disconnected before the GPU work producing its tensor finished");
    }
    if (std::chrono::steady_clock::now() - start > kReadyWaitLimit) {
      return deadlineExceeded("the GPU work of " + client.who() + " producing its tensor did not finish within " +
                              std::to_string(kReadyWaitLimit.count()) + " s");
    }
    // Spin briefly first: a rank records its event just before it asks, so
    // the work is usually done or microseconds away.
    if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }
}

Status GpuExecutor::recordDoneAfter(const Members& m, Status status) {
  // Once the stream waited for the ranks' ready events, their done events
  // are recorded whatever happened since: the ranks' streams wait on them
  // before reusing their tensors.
  Status recorded = recordDone(m);
  return status.isOk() ? recorded : status;
}

Status GpuExecutor::recordDoneOnGpus(const std::vector<Members>& groups, size_t waited, Status status) {
  for (size_t g = 0; g < waited && g < groups.size(); ++g) {
    if (groups[g].device >= 0) (void)ops_->select(groups[g].device);
    status = recordDoneAfter(groups[g], status);
  }
  return status;
}

Status GpuExecutor::copyFromLanding(const Response& r, const std::vector<Members>& groups,
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

Status GpuExecutor::recordDone(const Members& m) {
  // Every event is recorded even after one fails: a mapping whose last-use
  // event is missing could be unmapped under queued work.
  Status first = okStatus();
  for (const auto& member : m.list) {
    for (const auto& mapping : {member.data_mapping, member.output_mapping}) {
      if (!mapping) continue;
      Status used = ops_->recordEvent(mapping->lastUse(), m.stream);
      if (!used.isOk()) {
        mapping->keepMapped();  // its last use is unknown: never unmap it
        if (first.isOk()) first = context(used, "recording a last use of rank " + std::to_string(member.rank));
      }
    }
    if (member.slot == gpu::kNoEventSlot) continue;
    Status done = ops_->recordEvent(member.gpu->doneEvent(member.slot), m.stream);
    if (!done.isOk() && first.isOk()) {
      first = context(done, "recording rank " + std::to_string(member.rank) + "'s done event");
    }
  }
  return first;
}

Status GpuExecutor::allreduce(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(std::vector<Members> groups, resolveByDevice(r, access));
  const Request& first = r.first();
  RETURN_IF_ERROR(checkReduction(r.name, first));
  if (groups.size() > 1) return multiGpuAllreduce(r, groups, access);
  Members m = groups.empty() ? Members{} : std::move(groups.front());
  if (m.device < 0 || first.length == 0) return okStatus();  // no elements
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
  GpuPhaseTimer timer(ops_, access, m.device, m.stream);
  timer.begin("GPU_REDUCE");
  Status reduced = context(ops_->reduce(args, m.stream), "tensor '" + r.name + "'");
  timer.end();
  Status status = recordDoneAfter(m, reduced);
  timer.finish();
  return status;
}

Status GpuExecutor::broadcast(const Response& r, RankAccess& access) {
  ASSIGN_OR_RETURN(std::vector<Members> groups, resolveByDevice(r, access));
  if (groups.size() > 1) return multiGpuBroadcast(r, groups, access);
  Members m = groups.empty() ? Members{} : std::move(groups.front());
  if (m.device < 0 || r.first().length == 0) return okStatus();  // no elements
  const int root = r.first().root_rank;
  const uint8_t* source = nullptr;
  for (const auto& member : m.list) {
    if (member.rank == root) source = member.data;
  }
  if (source == nullptr) {
    return failedPrecondition("tensor '" + r.name + "': broadcast root " + std::to_string(root) +
                              " is not on this node");
  }
  RETURN_IF_ERROR(waitReady(m));
  GpuPhaseTimer timer(ops_, access, m.device, m.stream);
  timer.begin("GPU_COPY");
  Status status = okStatus();
  for (const auto& member : m.list) {
    if (member.data == source || !status.isOk()) continue;
    status = context(ops_->copy(member.data, source, r.first().length, gpu::CopyKind::kDeviceToDevice, m.stream),
                     "tensor '" + r.name + "': copy to rank " + std::to_string(member.rank));
  }
  timer.end();
  status = recordDoneAfter(m, status);
  timer.finish();
  return status;
}

Status GpuExecutor::checkOutputs(const Response& r, const Members& m, const std::vector<uint64_t>& bytes) {
  if (m.list.size() != bytes.size()) return internalError("tensor '" + r.name + "': members and outputs differ");
  for (size_t j = 0; j < bytes.size(); ++j) {
    if ((m.list[j].output == nullptr && bytes[j] > 0) || m.list[j].output_length != bytes[j]) {
      return invalidArgument("tensor '" + r.name + "': rank " + std::to_string(m.list[j].rank) + " gave an output of " +
                             std::to_string(m.list[j].output_length) + " bytes; the result has " +
                             std::to_string(bytes[j]));
    }
  }
  return okStatus();
}

ResponseResult GpuExecutor::allgather(const Response& r, RankAccess& access) {
  auto groups = resolveByDevice(r, access);
  if (!groups.isOk()) return failed(r, groups.status());
  if (groups->size() > 1) return multiGpuGatherLike(r, *groups, access);
  const Members m = groups->empty() ? Members{} : std::move(groups->front());
  const size_t row = rowBytes(r.first());
  int64_t total_rows = 0;
  for (const auto& request : r.requests) total_rows += request->shape.empty() ? 1 : request->shape[0];
  const auto shape = withFirstDim(r.first().shape, total_rows);
  Status status = checkOutputs(r, m, std::vector<uint64_t>(m.list.size(), total_rows * row));
  bool waited = false;
  if (status.isOk()) {
    status = waitReady(m);
    waited = status.isOk();
  }
  GpuPhaseTimer timer(ops_, access, m.device, waited ? m.stream : nullptr);
  timer.begin("GPU_COPY");
  for (size_t j = 0; status.isOk() && j < m.list.size(); ++j) {
    size_t offset = 0;
    for (size_t i = 0; status.isOk() && i < m.list.size(); ++i) {
      const uint64_t length = r.requests[i]->length;
      if (length > 0) {
        status = context(
            ops_->copy(m.list[j].output + offset, m.list[i].data, length, gpu::CopyKind::kDeviceToDevice, m.stream),
            "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[j].rank));
      }
      offset += length;
    }
  }
  timer.end();
  if (waited) status = recordDoneAfter(m, status);
  timer.finish();
  ResponseResult result = failed(r, status);
  if (status.isOk()) {
    for (auto& member : result.members) member.output_shape = shape;
  }
  return result;
}

ResponseResult GpuExecutor::alltoall(const Response& r, RankAccess& access) {
  auto groups = resolveByDevice(r, access);
  if (!groups.isOk()) return failed(r, groups.status());
  if (groups->size() > 1) return multiGpuGatherLike(r, *groups, access);
  const Members m = groups->empty() ? Members{} : std::move(groups->front());
  const size_t n = m.list.size();
  const size_t row = rowBytes(r.first());
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = alltoallLayout(r, &result);
  Status status = checkOutputs(r, m, layout.bytes);
  bool waited = false;
  if (status.isOk()) {
    status = waitReady(m);
    waited = status.isOk();
  }
  GpuPhaseTimer timer(ops_, access, m.device, waited ? m.stream : nullptr);
  timer.begin("GPU_COPY");
  std::vector<size_t> written(n, 0);
  for (size_t i = 0; status.isOk() && i < n; ++i) {
    size_t read = 0;
    for (size_t j = 0; status.isOk() && j < n; ++j) {
      const size_t length = r.requests[i]->splits[j] * row;
      if (length > 0) {
        status = context(ops_->copy(m.list[j].output + written[j], m.list[i].data + read, length,
                                    gpu::CopyKind::kDeviceToDevice, m.stream),
                         "tensor '" + r.name + "': copy to rank " + std::to_string(m.list[j].rank));
      }
      written[j] += length;
      read += length;
    }
  }
  timer.end();
  if (waited) status = recordDoneAfter(m, status);
  timer.finish();
  return status.isOk() ? result : failed(r, status);
}

ResponseResult GpuExecutor::reducescatter(const Response& r, RankAccess& access) {
  auto groups = resolveByDevice(r, access);
  if (!groups.isOk()) return failed(r, groups.status());
  if (groups->size() > 1) return multiGpuReducescatter(r, *groups, access);
  const Members m = groups->empty() ? Members{} : std::move(groups->front());
  const Request& first = r.first();
  const size_t row = rowBytes(first);
  const size_t esize = elementSize(first.dtype);
  const std::vector<int64_t> rows = reducescatterRows(r);
  if (Status valid = checkReduction(r.name, first); !valid.isOk()) return failed(r, valid);
  ResponseResult result = failed(r, okStatus());
  const OutputLayout layout = reducescatterLayout(r, rows, &result);
  Status status = checkOutputs(r, m, layout.bytes);
  bool waited = false;
  if (status.isOk()) {
    status = waitReady(m);
    waited = status.isOk();
  }
  GpuPhaseTimer timer(ops_, access, m.device, waited ? m.stream : nullptr);
  timer.begin("GPU_REDUCE");
  size_t start_row = 0;
  for (size_t j = 0; status.isOk() && j < m.list.size(); ++j) {
    cuda::LocalReduceArgs args;
    args.dtype = static_cast<cuda::Dtype>(first.dtype);
    args.op = static_cast<cuda::Op>(first.op);
    for (size_t k = 0; k < m.list.size(); ++k) args.inputs[k] = m.list[k].data + start_row * row;
    args.num_inputs = static_cast<int>(m.list.size());
    args.outputs[0] = m.list[j].output;
    args.num_outputs = 1;
    args.count = rows[j] * row / esize;
    args.prescale = first.prescale;
    args.postscale = first.postscale;
    args.average_divisor = static_cast<int>(r.ranks.size());
    if (args.count > 0) status = context(ops_->reduce(args, m.stream), "tensor '" + r.name + "'");
    start_row += rows[j];
  }
  timer.end();
  if (waited) status = recordDoneAfter(m, status);
  timer.finish();
  return status.isOk() ? result : failed(r, status);
}

}  // namespace gradsync::executor
