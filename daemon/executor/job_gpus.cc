// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/job_gpus.h"

#include <algorithm>
#include <map>
#include <thread>

#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/gpu_executor_util.h"

namespace gradsync::executor {
namespace {

// The index in r.requests of each member (members are local ranks, in
// request order).
std::vector<size_t> requestIndices(const Response& r, const std::vector<int>& member_ranks) {
  std::map<int, size_t> index;
  for (size_t i = 0; i < r.requests.size(); ++i) index[r.requests[i]->rank] = i;
  std::vector<size_t> out;
  for (int rank : member_ranks) out.push_back(index.at(rank));
  return out;
}

}  // namespace

JobGpus::~JobGpus() {
  fusion_.clear();  // freed in stream order, before the streams go
  for (const auto& [device, stream] : streams_) {
    const Status released = ops_->releaseStream(device, stream);
    if (!released.isOk())
      GS_LOG(gpu, err, "a job's stream on device {} left undestroyed: {}", device, released.message());
  }
}

StatusOr<void*> JobGpus::streamFor(int device) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  ASSIGN_OR_RETURN(void* stream, ops_->newStream(device));
  streams_[device] = stream;
  return stream;
}

StatusOr<gpu::GrowingBuffer*> JobGpus::fusionFor(int device) {
  auto& buffer = fusion_[device];
  if (!buffer) {
    ASSIGN_OR_RETURN(void* stream, streamFor(device));
    buffer = std::make_unique<gpu::GrowingBuffer>(ops_, device, stream);
  }
  return buffer.get();
}

uint8_t* JobGpus::staging(size_t bytes) {
  if (staging_.size() < bytes) staging_.resize(bytes);
  return staging_.data();
}

StatusOr<std::vector<JobGpus::Members>> JobGpus::resolveByDevice(const Response& r, RankAccess& access) {
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

Status JobGpus::waitReadyOnGpus(const std::vector<Members>& groups, size_t* waited) {
  for (const auto& group : groups) {
    if (group.device >= 0) RETURN_IF_ERROR(ops_->select(group.device));
    RETURN_IF_ERROR(waitReady(group));
    ++*waited;
  }
  return okStatus();
}

Status JobGpus::waitReady(const Members& m) {
  // On the host, not on the stream: a stream told to wait for the event of a
  // client that dies before reaching it would never run again, and every
  // other rank's done event behind it would never come.
  for (const auto& member : m.list) {
    if (member.slot == gpu::kNoEventSlot) continue;
    RETURN_IF_ERROR(waitForEvent(*member.gpu, member.gpu->readyEvent(member.slot)));
  }
  return okStatus();
}

Status JobGpus::waitForEvent(const gpu::ClientGpu& client, void* event) {
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

Status JobGpus::recordDoneAfter(const Members& m, Status status) {
  // Once the stream waited for the ranks' ready events, their done events
  // are recorded whatever happened since: the ranks' streams wait on them
  // before reusing their tensors.
  Status recorded = recordDone(m);
  return status.isOk() ? recorded : status;
}

Status JobGpus::recordDoneOnGpus(const std::vector<Members>& groups, size_t waited, Status status) {
  for (size_t g = 0; g < waited && g < groups.size(); ++g) {
    if (groups[g].device >= 0) (void)ops_->select(groups[g].device);
    status = recordDoneAfter(groups[g], status);
  }
  return status;
}

Status JobGpus::recordDone(const Members& m) {
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

std::vector<uint64_t> JobGpus::localBytes(const Members& m, const std::vector<size_t>& index,
                                          const std::vector<uint64_t>& all) {
  std::vector<uint64_t> bytes;
  for (size_t k = 0; k < m.list.size(); ++k) bytes.push_back(all[index[k]]);
  return bytes;
}

std::vector<size_t> JobGpus::memberIndices(const Response& r, const Members& m) {
  std::vector<int> ranks;
  for (const auto& member : m.list) ranks.push_back(member.rank);
  return requestIndices(r, ranks);
}

Status JobGpus::drainStaging(const std::vector<Members>& groups, Status status) {
  for (const auto& group : groups) {  // the staging buffer is the job's: read before the next batch
    if (group.stream == nullptr) continue;
    const Status drained = ops_->waitStream(group.stream, "waiting for the copies from the staging buffer");
    if (status.isOk()) status = drained;
  }
  return status;
}

Status JobGpus::checkOutputs(const Response& r, const Members& m, const std::vector<uint64_t>& bytes) {
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

Status JobGpus::stageInputs(const Response& r, const Members& m, const std::vector<size_t>& index,
                            const std::vector<size_t>& offset, uint8_t* host) {
  if (m.stream == nullptr) return okStatus();  // no local rank holds memory
  RETURN_IF_ERROR(ops_->waitStream(m.stream, "waiting for the job's stream"));
  for (size_t k = 0; k < m.list.size(); ++k) {
    const uint64_t length = r.requests[index[k]]->length;
    if (length == 0) continue;
    RETURN_IF_ERROR(context(
        ops_->copy(host + offset[index[k]], m.list[k].data, length, gpu::CopyKind::kDeviceToHost, m.stream),
        "tensor '" + r.name + "': copy of rank " + std::to_string(m.list[k].rank) + "'s tensor to the staging buffer"));
  }
  return okStatus();
}

StatusOr<std::vector<JobGpus::Members>> JobGpus::withLead(std::vector<Members> groups, int lead) {
  if (groups.empty() || groups.front().device < 0) return groups;  // no memory of a local rank here
  auto at = std::find_if(groups.begin(), groups.end(), [&](const Members& m) { return m.device == lead; });
  if (at == groups.end()) {
    Members empty;
    empty.device = lead;
    ASSIGN_OR_RETURN(empty.stream, streamFor(lead));
    groups.insert(groups.begin(), std::move(empty));
  } else {
    std::rotate(groups.begin(), at, at + 1);
  }
  return groups;
}

int JobGpus::firstDevice(const std::vector<Members>& groups) { return groups.empty() ? -1 : groups.front().device; }

StatusOr<std::vector<std::vector<size_t>>> JobGpus::checkedIndices(const Response& r,
                                                                   const std::vector<Members>& groups,
                                                                   const std::vector<uint64_t>& bytes) {
  std::vector<std::vector<size_t>> index;
  for (const auto& group : groups) {
    index.push_back(memberIndices(r, group));
    RETURN_IF_ERROR(checkOutputs(r, group, localBytes(group, index.back(), bytes)));
  }
  return index;
}

}  // namespace gradsync::executor
