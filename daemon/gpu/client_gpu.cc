// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/client_gpu.h"

#include "daemon/common/logging.h"

namespace gradsync::gpu {

StatusOr<std::unique_ptr<ClientGpu>> ClientGpu::attach(GpuBackend* backend, int device,
                                                       const std::string& device_uuid,
                                                       const v1::CudaAttach& request, const std::string& who) {
  const int slots = request.ready_events_size();
  if (slots < 1 || slots > kMaxEventSlots) {
    return invalidArgument(who + ": " + std::to_string(slots) + " ready events (1.." +
                           std::to_string(kMaxEventSlots) + " allowed)");
  }
  std::unique_ptr<ClientGpu> client(new ClientGpu(backend, device, device_uuid, who));
  for (int i = 0; i < slots; ++i) {
    const std::string& handle = request.ready_events(i);
    if (handle.size() != kIpcHandleBytes) {
      return invalidArgument(who + ": ready event " + std::to_string(i) + " has " + std::to_string(handle.size()) +
                             " bytes, not " + std::to_string(kIpcHandleBytes));
    }
    auto event = backend->openEvent(device, handle);
    if (!event.isOk()) {
      return Status(event.status().code(), who + ": cannot open ready event " + std::to_string(i) + ": " +
                                               event.status().message());
    }
    client->ready_.push_back(*event);
    auto done = backend->createSharedEvent(device);
    if (!done.isOk()) return Status(done.status().code(), who + ": cannot create done event: " + done.status().message());
    client->done_.push_back(*done);
  }
  return client;
}

ClientGpu::~ClientGpu() { releaseAll(); }

void ClientGpu::releaseAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Kernels of this client's last operations may still run: wait for them
  // before unmapping (closing a mapping in use is undefined behaviour).
  const Status idle = backend_->synchronize(device_);
  if (!idle.isOk()) {
    // Unmapping memory that queued work still touches could fault the
    // daemon's context: keep the mappings (a leak, logged) rather than that.
    GS_LOG(gpu, err, "{}: device {} not idle at release ({}); leaving {} mapping(s) open", who_, device_,
           idle.message(), buffers_.size());
    buffers_.clear();
    ready_.clear();
    done_.clear();
    return;
  }
  for (auto& [id, buffer] : buffers_) {
    const Status closed = backend_->closeMemory(device_, buffer.address);
    if (!closed.isOk()) GS_LOG(gpu, warn, "{}: closing buffer {}: {}", who_, id, closed.message());
  }
  buffers_.clear();
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
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buffers_.find(request.buffer_id());
  if (it != buffers_.end()) {
    if (it->second.bytes == request.bytes() && it->second.handle == request.ipc_handle()) return okStatus();
    return alreadyExists(what + " was exported before with another size or handle (buffer ids are never reused)");
  }
  if (buffers_.size() >= kMaxBuffersPerClient) {
    return resourceExhausted(what + ": already " + std::to_string(buffers_.size()) + " allocations mapped");
  }
  auto address = backend_->openMemory(device_, request.ipc_handle());
  if (!address.isOk()) {
    return Status(address.status().code(), what + " (" + std::to_string(request.bytes()) +
                                               " bytes): cannot map: " + address.status().message());
  }
  buffers_[request.buffer_id()] = Buffer{*address, request.bytes(), request.ipc_handle()};
  return okStatus();
}

Status ClientGpu::removeBuffer(uint64_t buffer_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buffers_.find(buffer_id);
  if (it == buffers_.end()) return notFound(who_ + ": unknown CUDA buffer " + std::to_string(buffer_id));
  RETURN_IF_ERROR(backend_->synchronize(device_));
  Status closed = backend_->closeMemory(device_, it->second.address);
  buffers_.erase(it);
  return closed;
}

size_t ClientGpu::bufferCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buffers_.size();
}

StatusOr<uint8_t*> ClientGpu::address(uint64_t buffer_id, uint64_t offset, uint64_t length) const {
  std::lock_guard<std::mutex> lock(mutex_);
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
  return static_cast<uint8_t*>(it->second.address) + offset;
}

Status ClientGpu::checkSlot(uint32_t slot) const {
  if (slot >= ready_.size()) {
    return invalidArgument(who_ + ": event slot " + std::to_string(slot) + " outside [0, " +
                           std::to_string(ready_.size()) + ")");
  }
  return okStatus();
}

}  // namespace gradsync::gpu
