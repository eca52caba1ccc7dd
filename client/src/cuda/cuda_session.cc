// SPDX-License-Identifier: Apache-2.0
#include "client/src/cuda/cuda_session.h"

#include <algorithm>
#include <thread>

#include "handoff/shm_layout.h"

namespace gradsync::client {
namespace {

using handoff::kMaxFdsPerFrame;
using handoff::kNoCudaBuffer;
using handoff::kNoEventSlot;

// View ids (cuMem memory) lie far above the driver's buffer ids, which count
// allocations from 1.
constexpr uint64_t kFirstViewId = uint64_t{1} << 62;

Status fromResponse(const v1::HandoffResponse& response) {
  if (response.code() == 0) return okStatus();
  return Status(static_cast<StatusCode>(response.code()), response.message());
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

CudaSession::CudaSession(CudaSessionOptions options, DriverLoader loader, HandoffChannel channel)
    : options_(std::move(options)),
      loader_(std::move(loader)),
      channel_(std::move(channel)),
      next_view_id_(kFirstViewId) {}

CudaSession::~CudaSession() {
  if (!driver_) return;
  staging_.freeAll(*driver_, context_);
  for (void* event : ready_) driver_->destroyEvent(context_, event);
  for (void* event : done_) driver_->destroyEvent(context_, event);
}

StatusOr<CudaSession::Prepared> CudaSession::prepare(const std::string& name, const void* data, uint64_t bytes,
                                                     void* stream, bool written) {
  MutexLock lock(mutex_);
  Prepared prepared;
  ASSIGN_OR_RETURN(v1::CudaTensorRef ref, locateLocked(name, data, bytes, &prepared.staged, stream, true));
  prepared.staged.copy_back = written;
  auto slot = takeSlotLocked(name, stream);
  if (!slot.isOk()) {
    (void)unstageLocked(prepared.staged, stream, false);
    return slot.status();
  }
  prepared.ref = ref;
  prepared.ref.set_event_slot(*slot);
  prepared.stream = stream;
  ++exports_[ref.buffer_id()].in_flight;
  return prepared;
}

StatusOr<CudaSession::Prepared> CudaSession::prepareEmpty(const std::string& name, void* stream, bool with_events) {
  Prepared prepared;
  prepared.ref.set_buffer_id(kNoCudaBuffer);
  prepared.ref.set_event_slot(kNoEventSlot);
  prepared.stream = stream;
  if (!with_events) return prepared;
  MutexLock lock(mutex_);
  if (device_uuid_.empty()) {
    return failedPrecondition("CUDA tensor '" + name +
                              "': an empty tensor as this rank's first CUDA tensor: its GPU is unknown");
  }
  ASSIGN_OR_RETURN(const uint32_t slot, takeSlotLocked(name, stream));
  prepared.ref.set_event_slot(slot);
  return prepared;
}

StatusOr<uint32_t> CudaSession::takeSlotLocked(const std::string& name, void* stream) {
  const std::string prefix = "CUDA tensor '" + name + "': ";
  if (free_slots_.empty()) {
    return resourceExhausted(prefix + std::to_string(ready_.size()) +
                             " CUDA operations of this rank are in flight already; wait for some first");
  }
  const uint32_t slot = free_slots_.back();
  Status recorded = driver_->recordEvent(context_, ready_[slot], stream);
  if (!recorded.isOk()) return Status(recorded.code(), prefix + recorded.message());
  free_slots_.pop_back();
  return slot;
}

StatusOr<CudaSession::PreparedOutput> CudaSession::prepareOutput(const std::string& name, const void* data,
                                                                 uint64_t bytes, void* stream) {
  MutexLock lock(mutex_);
  PreparedOutput output;
  output.stream = stream;
  if (bytes == 0) {
    output.ref.set_buffer_id(kNoCudaBuffer);
    return output;
  }
  ASSIGN_OR_RETURN(output.ref, locateLocked(name + " (output)", data, bytes, &output.staged, stream, false));
  output.staged.copy_back = true;
  ++exports_[output.ref.buffer_id()].in_flight;
  return output;
}

Status CudaSession::releaseOutput(const PreparedOutput& output, bool ok) {
  MutexLock lock(mutex_);
  if (output.ref.buffer_id() == kNoCudaBuffer) return okStatus();
  unuseLocked(output.ref.buffer_id());
  return unstageLocked(output.staged, output.stream, ok);
}

Status CudaSession::unstageLocked(const Staged& staged, void* stream, bool copy) {
  if (staged.staging == 0) return okStatus();
  Status copied = okStatus();
  if (copy && staged.copy_back && staged.bytes > 0) {
    copied = driver_->copy(context_, staged.user, staged.staging, staged.bytes, stream);
  }
  Status given = staging_.give(*driver_, context_, staged.staging, stream);
  return copied.isOk() ? given : copied;
}

StatusOr<v1::CudaTensorRef> CudaSession::locateLocked(const std::string& name, const void* data, uint64_t bytes,
                                                      Staged* staged, void* stream, bool copy_in) {
  const std::string prefix = "CUDA tensor '" + name + "': ";
  // A daemon without GPUs: say so before touching CUDA at all.
  if (options_.daemon_gpus.empty()) {
    return failedPrecondition(prefix + options_.daemon_name +
                              " has no GPU; reduce CPU tensors or use a daemon "
                              "on a GPU node");
  }
  if (!driver_) {
    auto driver = loader_();
    if (!driver.isOk()) return Status(driver.status().code(), prefix + driver.status().message());
    driver_ = std::move(driver).value();
  }
  auto info = driver_->pointerInfo(data);
  if (!info.isOk()) return Status(info.status().code(), prefix + info.status().message());
  if (!info->device_memory) return invalidArgument(prefix + "the pointer is not CUDA device memory");
  const uint64_t start = reinterpret_cast<uint64_t>(data);
  if (start < info->base || bytes > info->size || start - info->base > info->size - bytes) {
    return outOfRange(prefix + std::to_string(bytes) + " bytes at offset " + std::to_string(start - info->base) +
                      " run past the end of their allocation of " + std::to_string(info->size) + " bytes");
  }
  if (device_uuid_.empty()) RETURN_IF_ERROR(attachLocked(*info));
  if (info->device_uuid != device_uuid_) {
    return unimplemented(prefix + "is on " + info->device_uuid + ", but this rank's earlier CUDA tensors were on " +
                         device_uuid_ + " (one GPU per rank)");
  }
  if (info->pool && staged != nullptr) {
    // Copied into a buffer of this session, which the daemon maps instead.
    ASSIGN_OR_RETURN(const uint64_t buffer, staging_.take(*driver_, context_, bytes, stream));
    *staged = Staged{buffer, start, bytes, false};
    Status copied = copy_in && bytes > 0 ? driver_->copy(context_, buffer, start, bytes, stream) : okStatus();
    auto located = copied.isOk() ? locateLocked(name, reinterpret_cast<const void*>(buffer), bytes)
                                 : StatusOr<v1::CudaTensorRef>(copied);
    if (!located.isOk()) {
      (void)unstageLocked(*staged, stream, false);
      *staged = Staged{};
      return Status(located.status().code(),
                    prefix + "staging its cudaMallocAsync memory: " + located.status().message());
    }
    return located;
  }
  Located located{info->buffer_id, info->base};
  if (info->legacy_ipc) {
    ASSIGN_OR_RETURN(located.id, exportLocked(name, *info));
  } else {
    ASSIGN_OR_RETURN(located, exportViewLocked(name, *info, start, bytes));
  }
  v1::CudaTensorRef ref;
  ref.set_buffer_id(located.id);
  ref.set_offset(start - located.base);
  return ref;
}

Status CudaSession::attachLocked(const PointerInfo& info) {
  if (std::find(options_.daemon_gpus.begin(), options_.daemon_gpus.end(), info.device_uuid) ==
      options_.daemon_gpus.end()) {
    return failedPrecondition("the tensor is on " + info.device_uuid + ", which " + options_.daemon_name +
                              " does not serve (it has " + joined(options_.daemon_gpus) + ")");
  }
  context_ = info.context;
  v1::HandoffRequest request;
  v1::CudaAttach* attach = request.mutable_cuda_attach();
  attach->set_device_uuid(info.device_uuid);
  std::vector<void*> ready;
  auto destroyAll = [&]() GS_REQUIRES(mutex_) {
    for (void* event : ready) driver_->destroyEvent(context_, event);
  };
  for (int i = 0; i < options_.event_slots; ++i) {
    std::string handle;
    auto event = driver_->createIpcEvent(context_, &handle);
    if (!event.isOk()) {
      destroyAll();
      return event.status();
    }
    ready.push_back(*event);
    attach->add_ready_events(handle);
  }
  v1::HandoffResponse response;
  Status sent = channel_(request, &response, {});
  if (sent.isOk()) sent = fromResponse(response);
  if (sent.isOk() && response.done_events_size() != options_.event_slots) {
    sent = internalError("gradsyncd answered the GPU attach with " + std::to_string(response.done_events_size()) +
                         " done events for " + std::to_string(options_.event_slots) + " slots");
  }
  std::vector<void*> done;
  for (int i = 0; sent.isOk() && i < response.done_events_size(); ++i) {
    auto event = driver_->openIpcEvent(context_, response.done_events(i));
    if (event.isOk()) {
      done.push_back(*event);
    } else {
      sent = event.status();
    }
  }
  if (!sent.isOk()) {
    destroyAll();
    for (void* event : done) driver_->destroyEvent(context_, event);
    return Status(sent.code(), "attaching GPU " + info.device_uuid + ": " + sent.message());
  }
  ready_ = std::move(ready);
  done_ = std::move(done);
  free_slots_.clear();
  for (int i = options_.event_slots - 1; i >= 0; --i) free_slots_.push_back(static_cast<uint32_t>(i));
  device_uuid_ = info.device_uuid;
  return okStatus();
}

StatusOr<uint64_t> CudaSession::exportLocked(const std::string& name, const PointerInfo& info) {
  auto it = exports_.find(info.buffer_id);
  if (it != exports_.end()) {
    it->second.last_use = ++use_clock_;
    return info.buffer_id;
  }
  const std::string prefix = "CUDA tensor '" + name + "': ";
  auto handle = driver_->exportMemory(info.context, info.base);
  if (!handle.isOk()) return Status(handle.status().code(), prefix + handle.status().message());
  v1::HandoffRequest request;
  v1::CudaBufferExport* exported = request.mutable_buffer_export();
  exported->set_buffer_id(info.buffer_id);
  exported->set_bytes(info.size);
  exported->set_ipc_handle(*handle);
  exported->set_device_uuid(info.device_uuid);
  v1::HandoffResponse response;
  Status sent = channel_(request, &response, {});
  if (sent.isOk()) sent = fromResponse(response);
  if (!sent.isOk()) return Status(sent.code(), prefix + sent.message());
  if (exports_.size() >= options_.max_cached_buffers) evictLocked();
  Export& added = exports_[info.buffer_id];
  added.base = info.base;
  added.size = info.size;
  added.last_use = ++use_clock_;
  return info.buffer_id;
}

StatusOr<CudaSession::Located> CudaSession::exportViewLocked(const std::string& name, const PointerInfo& info,
                                                             uint64_t start, uint64_t bytes) {
  const std::string prefix = "CUDA tensor '" + name + "': ";
  // The mappings under the tensor, each asked of the driver on every use: a
  // mapping the allocator replaced has another block id.
  std::vector<MemoryChunk> chunks;
  const uint64_t end = start + std::max<uint64_t>(bytes, 1);
  for (uint64_t at = start; at < end;) {
    if (chunks.size() == kMaxFdsPerFrame) {
      return unimplemented(prefix + "its " + std::to_string(bytes) + " bytes span more than " +
                           std::to_string(kMaxFdsPerFrame) + " cuMem mappings, the most one export may hold");
    }
    auto chunk = driver_->chunkAt(at);
    if (!chunk.isOk()) return Status(chunk.status().code(), prefix + chunk.status().message());
    if (chunk->size == 0 || chunk->base > at || at - chunk->base >= chunk->size) {
      return internalError(prefix + "the driver describes the cuMem mapping at " + std::to_string(at) + " as [" +
                           std::to_string(chunk->base) + ", +" + std::to_string(chunk->size) + ")");
    }
    chunks.push_back(*chunk);
    at = chunk->base + chunk->size;
  }
  const uint64_t base = chunks.front().base;
  auto view = views_.find(base);
  if (view != views_.end()) {
    auto it = exports_.find(view->second);
    const bool same = it != exports_.end() && it->second.blocks.size() >= chunks.size() &&
                      std::equal(chunks.begin(), chunks.end(), it->second.blocks.begin(),
                                 [](const MemoryChunk& c, uint64_t block) { return c.block_id == block; });
    if (same) {
      it->second.last_use = ++use_clock_;
      return Located{it->first, base};
    }
    // A mapping changed, or the tensor reaches further: a new view. The old
    // one goes now, or once the operations using it are done.
    views_.erase(view);
    if (it != exports_.end()) {
      if (it->second.in_flight > 0) {
        it->second.stale = true;
      } else {
        (void)forgetLocked(it);
      }
    }
  }
  const uint64_t id = next_view_id_++;
  Status sent = sendViewLocked(id, info, chunks);
  if (!sent.isOk()) return Status(sent.code(), prefix + sent.message());
  if (exports_.size() >= options_.max_cached_buffers) evictLocked();
  Export& added = exports_[id];
  added.base = base;
  added.last_use = ++use_clock_;
  for (const auto& chunk : chunks) {
    added.size += chunk.size;
    added.blocks.push_back(chunk.block_id);
  }
  views_[base] = id;
  return Located{id, base};
}

Status CudaSession::sendViewLocked(uint64_t id, const PointerInfo& info, const std::vector<MemoryChunk>& chunks) {
  v1::HandoffRequest request;
  v1::CudaBufferExport* exported = request.mutable_buffer_export();
  exported->set_buffer_id(id);
  exported->set_device_uuid(info.device_uuid);
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  uint64_t total = 0;
  for (const auto& chunk : chunks) {
    auto fd = driver_->exportChunk(info.context, chunk.base);
    if (!fd.isOk()) {
      if (fd.status().code() != StatusCode::kFailedPrecondition) return fd.status();
      return unimplemented(
          "its cuMem memory cannot be exported by file descriptor (allocated without "
          "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR?): " +
          fd.status().message());
    }
    fds.push_back(fd->get());
    owned.push_back(std::move(fd).value());
    exported->add_chunk_bytes(chunk.size);
    total += chunk.size;
  }
  exported->set_bytes(total);
  v1::HandoffResponse response;
  Status sent = channel_(request, &response, fds);
  if (sent.isOk()) sent = fromResponse(response);
  return sent;  // `owned` closes this process's copies of the descriptors
}

void CudaSession::unuseLocked(uint64_t id) {
  auto it = exports_.find(id);
  if (it == exports_.end()) return;
  if (it->second.in_flight > 0) --it->second.in_flight;
  if (it->second.in_flight == 0 && it->second.stale) (void)forgetLocked(it);
}

Status CudaSession::forgetLocked(std::map<uint64_t, Export>::iterator it) {
  const uint64_t id = it->first;
  if (!it->second.blocks.empty()) {
    auto view = views_.find(it->second.base);
    if (view != views_.end() && view->second == id) views_.erase(view);
  }
  exports_.erase(it);
  v1::HandoffRequest request;
  request.mutable_buffer_release()->set_buffer_id(id);
  v1::HandoffResponse response;
  Status sent = channel_(request, &response, {});
  if (sent.isOk()) sent = fromResponse(response);
  return sent;
}

void CudaSession::evictLocked() {
  auto oldest = exports_.end();
  for (auto it = exports_.begin(); it != exports_.end(); ++it) {
    if (it->second.in_flight == 0 && (oldest == exports_.end() || it->second.last_use < oldest->second.last_use)) {
      oldest = it;
    }
  }
  if (oldest == exports_.end()) return;  // all in use: the cache grows past its bound for now
  (void)forgetLocked(oldest);            // best effort: the daemon unmaps at the session's end anyway
}

Status CudaSession::complete(const Prepared& prepared, bool ok) {
  MutexLock lock(mutex_);
  const uint32_t slot = prepared.ref.event_slot();
  if (slot == kNoEventSlot) return okStatus();  // an empty tensor without events
  if (slot >= done_.size()) return internalError("CUDA event slot out of range");
  // Even a failed operation may have queued work on the daemon's stream
  // before it failed (the daemon records done once it waited for ready):
  // the caller's stream waits either way. A done event never recorded for
  // this operation holds its earlier, completed record: no wait then.
  Status waited = driver_->streamWaitEvent(context_, prepared.stream, done_[slot]);
  Status released = releaseSlotLocked(prepared, ok && waited.isOk());
  return waited.isOk() ? released : waited;
}

Status CudaSession::completeOnHost(const Prepared& prepared, const std::string& name,
                                   const std::function<Status()>& broken, std::chrono::milliseconds limit) {
  const uint32_t slot = prepared.ref.event_slot();
  if (slot == kNoEventSlot) return okStatus();
  void* event = nullptr;
  CudaDriver* driver = nullptr;  // polled without the lock: set before any tensor, kept until the end
  void* context = nullptr;
  {
    MutexLock lock(mutex_);
    if (slot >= done_.size()) return internalError("CUDA event slot out of range");
    event = done_[slot];
    driver = driver_.get();
    context = context_;
  }
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    StatusOr<bool> done = driver->eventDone(context, event);
    if (!done.isOk()) break;  // the stream waits instead (below)
    if (*done) {
      MutexLock lock(mutex_);
      return releaseSlotLocked(prepared, true);
    }
    if (Status gone = broken(); !gone.isOk()) {
      MutexLock lock(mutex_);
      (void)releaseSlotLocked(prepared, false);  // the daemon and its work are gone
      return gone;
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > limit) {
      Status ordered = complete(prepared, false);
      return deadlineExceeded("CUDA tensor '" + name + "': the daemon's GPU work did not finish within " +
                              std::to_string(limit.count() / 1000) + " s" +
                              (ordered.isOk() ? std::string(" (the stream waits for it)") : ": " + ordered.message()));
    }
    // Spin briefly (the work is usually done within microseconds), then sleep.
    if (waited < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 64 ? 20 : 200));
    }
  }
  return complete(prepared, true);
}

Status CudaSession::releaseSlotLocked(const Prepared& prepared, bool copy) {
  free_slots_.push_back(prepared.ref.event_slot());
  unuseLocked(prepared.ref.buffer_id());
  return unstageLocked(prepared.staged, prepared.stream, copy);
}

Status CudaSession::releaseExports() {
  MutexLock lock(mutex_);
  Status first = okStatus();
  for (auto it = exports_.begin(); it != exports_.end();) {
    if (it->second.in_flight > 0) {  // still used: released by a later call
      ++it;
      continue;
    }
    Status sent = forgetLocked(it++);
    if (!sent.isOk() && first.isOk()) first = sent;
  }
  // Staging buffers no operation holds: their exports were forgotten above.
  if (driver_) {
    for (uint64_t address : staging_.idle()) staging_.free(*driver_, context_, address);
  }
  return first;
}

size_t CudaSession::cachedBuffers() const {
  MutexLock lock(mutex_);
  return exports_.size();
}

bool CudaSession::slotsExhausted() const {
  MutexLock lock(mutex_);
  return !ready_.empty() && free_slots_.empty();
}

int CudaSession::freeSlots() const {
  MutexLock lock(mutex_);
  return static_cast<int>(free_slots_.size());
}

}  // namespace gradsync::client
