// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/client_gpu.h"

#include "daemon/common/logging.h"

namespace gradsync::gpu {

StatusOr<std::unique_ptr<ClientGpu>> ClientGpu::attach(GpuBackend* backend, int device, const std::string& device_uuid,
                                                       const v1::CudaAttach& request, const std::string& who,
                                                       MappingLimits limits) {
  const int slots = request.ready_events_size();
  if (slots < 1 || slots > kMaxEventSlots) {
    return invalidArgument(who + ": " + std::to_string(slots) + " ready events (1.." + std::to_string(kMaxEventSlots) +
                           " allowed)");
  }
  std::unique_ptr<ClientGpu> client(new ClientGpu(backend, device, device_uuid, who, limits));
  for (int i = 0; i < slots; ++i) {
    const std::string& handle = request.ready_events(i);
    if (handle.size() != kIpcHandleBytes) {
      return invalidArgument(who + ": ready event " + std::to_string(i) + " has " + std::to_string(handle.size()) +
                             " bytes, not " + std::to_string(kIpcHandleBytes));
    }
    auto event = backend->openEvent(device, handle);
    if (!event.isOk()) {
      return Status(event.status().code(),
                    who + ": cannot open ready event " + std::to_string(i) + ": " + event.status().message());
    }
    client->ready_.push_back(*event);
    auto done = backend->createSharedEvent(device);
    if (!done.isOk())
      return Status(done.status().code(), who + ": cannot create done event: " + done.status().message());
    client->done_.push_back(*done);
  }
  return client;
}

Mapping::~Mapping() {
  if (keep_.load()) {
    GS_LOG(gpu, err, "{}: its last use is unknown; leaving it mapped", what_);
    return;
  }
  backend_->closeWhenIdle(device_, memory_.address, last_use_, what_);
}

ClientGpu::~ClientGpu() { releaseAll(); }

void ClientGpu::releaseAll() {
  std::map<uint64_t, Buffer> gone;
  {
    MutexLock lock(mutex_);
    gone.swap(buffers_);
  }
  gone.clear();  // each mapping closes once no executor holds it (after its last work)
  // Events with work still queued are released by the driver once it completes.
  for (void* event : ready_) backend_->destroyEvent(device_, event);
  for (auto& event : done_) backend_->destroyEvent(device_, event.event);
  ready_.clear();
  done_.clear();
}

std::vector<std::string> ClientGpu::doneEventHandles() const {
  std::vector<std::string> handles;
  for (const auto& event : done_) handles.push_back(event.handle);
  return handles;
}

Status ClientGpu::addBuffer(const v1::CudaBufferExport& request) {
  const std::string what = who_ + ": CUDA buffer " + std::to_string(request.buffer_id());
  if (request.device_uuid() != device_uuid_) {
    return invalidArgument(what + " is on " + request.device_uuid() + ", but the rank attached to " + device_uuid_);
  }
  if (request.ipc_handle().size() != kIpcHandleBytes) {
    return invalidArgument(what + ": IPC handle of " + std::to_string(request.ipc_handle().size()) + " bytes");
  }
  if (request.bytes() == 0) return invalidArgument(what + ": empty allocation");
  MutexLock lock(mutex_);
  auto it = buffers_.find(request.buffer_id());
  if (it != buffers_.end()) {
    if (it->second.bytes == request.bytes() && it->second.handle == request.ipc_handle()) return okStatus();
    return alreadyExists(what + " was exported before with another size or handle (buffer ids are never reused)");
  }
  if (buffers_.size() >= limits_.per_client) {
    return resourceExhausted(what + ": already " + std::to_string(buffers_.size()) +
                             " allocations mapped, the most one rank may have (max_ipc_mappings_per_rank)");
  }
  Budget::Lease lease;
  if (limits_.daemon != nullptr) {
    auto taken = limits_.daemon->acquire(1, what);
    if (!taken.isOk()) return Status(taken.status().code(), taken.status().message() + " (max_ipc_mappings)");
    lease = std::move(*taken);
  }
  auto memory = backend_->openMemory(device_, request.ipc_handle());
  if (!memory.isOk()) {
    return Status(memory.status().code(),
                  what + " (" + std::to_string(request.bytes()) + " bytes): cannot map: " + memory.status().message());
  }
  auto last_use = backend_->createEvent(device_);
  if (!last_use.isOk() || request.bytes() > memory->bytes) {
    (void)backend_->closeMemory(device_, memory->address);
    if (!last_use.isOk()) return Status(last_use.status().code(), what + ": " + last_use.status().message());
    return invalidArgument(what + " claims " + std::to_string(request.bytes()) + " bytes, but the allocation holds " +
                           std::to_string(memory->bytes));
  }
  auto mapping = std::make_shared<Mapping>(backend_, device_, *memory, *last_use, what, std::move(lease));
  buffers_[request.buffer_id()] = Buffer{std::move(mapping), request.bytes(), request.ipc_handle()};
  return okStatus();
}

Status ClientGpu::removeBuffer(uint64_t buffer_id) {
  std::shared_ptr<Mapping> gone;
  {
    MutexLock lock(mutex_);
    auto it = buffers_.find(buffer_id);
    if (it == buffers_.end()) return notFound(who_ + ": unknown CUDA buffer " + std::to_string(buffer_id));
    gone = std::move(it->second.mapping);
    buffers_.erase(it);
  }
  return okStatus();  // `gone` unmaps here, or with the last executor using it
}

size_t ClientGpu::bufferCount() const {
  MutexLock lock(mutex_);
  return buffers_.size();
}

StatusOr<Located> ClientGpu::locate(uint64_t buffer_id, uint64_t offset, uint64_t length) const {
  if (buffer_id == kNoBuffer) {
    if (offset != 0 || length != 0)
      return invalidArgument(who_ + ": " + std::to_string(length) + " bytes in no buffer");
    return Located{};
  }
  MutexLock lock(mutex_);
  auto it = buffers_.find(buffer_id);
  if (it == buffers_.end()) {
    return invalidArgument(who_ + ": CUDA buffer " + std::to_string(buffer_id) + " was never exported");
  }
  const uint64_t size = it->second.bytes;
  if (offset > size || length > size - offset) {
    return outOfRange(who_ + ": range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                      ") lies outside CUDA buffer " + std::to_string(buffer_id) + " of " + std::to_string(size) +
                      " bytes");
  }
  return Located{it->second.mapping->base() + offset, it->second.mapping};
}

Status ClientGpu::checkSlot(uint32_t slot) const {
  if (slot == kNoEventSlot) return okStatus();
  if (slot >= ready_.size()) {
    return invalidArgument(who_ + ": event slot " + std::to_string(slot) + " outside [0, " +
                           std::to_string(ready_.size()) + ")");
  }
  return okStatus();
}

}  // namespace gradsync::gpu
