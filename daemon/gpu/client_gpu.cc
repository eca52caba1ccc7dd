// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/client_gpu.h"

#include <algorithm>

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

namespace {

// What identifies an export for a repeated one: the IPC handle, or the
// chunks' sizes.
std::string exportKey(const v1::CudaBufferExport& request) {
  if (request.chunk_bytes_size() == 0) return request.ipc_handle();
  std::string key = "chunks";
  for (uint64_t bytes : request.chunk_bytes()) key += " " + std::to_string(bytes);
  return key;
}

}  // namespace

StatusOr<MappedMemory> ClientGpu::open(const v1::CudaBufferExport& request, std::vector<UniqueFd> fds) {
  if (request.chunk_bytes_size() == 0) {
    if (!fds.empty()) return invalidArgument("descriptors with an IPC handle export");
    if (request.ipc_handle().size() != kIpcHandleBytes) {
      return invalidArgument("IPC handle of " + std::to_string(request.ipc_handle().size()) + " bytes");
    }
    return backend_->openMemory(device_, request.ipc_handle());
  }
  const size_t chunks = static_cast<size_t>(request.chunk_bytes_size());
  if (!request.ipc_handle().empty()) return invalidArgument("both an IPC handle and cuMem chunks");
  if (chunks > handoff::kMaxFdsPerFrame) {
    return invalidArgument("" + std::to_string(chunks) + " cuMem chunks (at most " +
                           std::to_string(handoff::kMaxFdsPerFrame) + ")");
  }
  if (fds.size() != chunks) {
    return invalidArgument("" + std::to_string(chunks) + " cuMem chunks but " + std::to_string(fds.size()) +
                           " descriptors came with them");
  }
  uint64_t total = 0;
  for (uint64_t bytes : request.chunk_bytes()) {
    if (bytes == 0 || bytes > request.bytes() - total) {
      return invalidArgument("cuMem chunks of " + std::to_string(bytes) + " bytes do not add up to " +
                             std::to_string(request.bytes()));
    }
    total += bytes;
  }
  if (total != request.bytes()) {
    return invalidArgument("cuMem chunks of " + std::to_string(total) + " bytes for an export of " +
                           std::to_string(request.bytes()));
  }
  const std::vector<uint64_t> sizes(request.chunk_bytes().begin(), request.chunk_bytes().end());
  return backend_->openChunks(device_, std::move(fds), sizes);
}

Status ClientGpu::addBuffer(const v1::CudaBufferExport& request, std::vector<UniqueFd> fds) {
  const std::string what = who_ + ": CUDA buffer " + std::to_string(request.buffer_id());
  if (request.device_uuid() != device_uuid_) {
    return invalidArgument(what + " is on " + request.device_uuid() + ", but the rank attached to " + device_uuid_);
  }
  if (request.bytes() == 0) return invalidArgument(what + ": empty allocation");
  const std::string key = exportKey(request);
  MutexLock lock(mutex_);
  auto it = buffers_.find(request.buffer_id());
  if (it != buffers_.end()) {
    if (it->second.bytes == request.bytes() && it->second.handle == key) return okStatus();
    return alreadyExists(what + " was exported before with another size or handle (buffer ids are never reused)");
  }
  if (buffers_.size() >= limits_.per_client) {
    return resourceExhausted(what + ": already " + std::to_string(buffers_.size()) +
                             " allocations mapped, the most one rank may have (max_ipc_mappings_per_rank)");
  }
  Budget::Lease lease;
  if (limits_.daemon != nullptr) {
    // A cuMem view maps each of its chunks: each counts, as an IPC mapping does.
    const uint64_t mappings = std::max<uint64_t>(1, static_cast<uint64_t>(request.chunk_bytes_size()));
    auto taken = limits_.daemon->acquire(mappings, what);
    if (!taken.isOk()) return Status(taken.status().code(), taken.status().message() + " (max_ipc_mappings)");
    lease = std::move(*taken);
  }
  auto memory = open(request, std::move(fds));
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
  buffers_[request.buffer_id()] = Buffer{std::move(mapping), request.bytes(), key};
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
