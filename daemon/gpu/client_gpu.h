// SPDX-License-Identifier: Apache-2.0
// One rank's CUDA state inside the daemon: the GPU it uses, its pool of
// ready/done event pairs, and the allocations it exported, each mapped once
// (cudaIpcOpenMemHandle costs milliseconds) and closed when the rank forgets
// it or goes away, so that a dead client's memory is released.
//
// Every lookup checks the buffer id, the byte range against the allocation's
// size (overflow-safe) and the event slot: a client can only name memory it
// exported itself. Thread-safe: the hand-off thread adds and removes
// allocations while executor threads look them up.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/common/budget.h"
#include "daemon/gpu/gpu_backend.h"
#include "handoff/shm_layout.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::gpu {

// A reference to no memory (a tensor without elements), and an operation
// without events (one that writes nothing of this rank's).
constexpr uint64_t kNoBuffer = handoff::kNoCudaBuffer;
constexpr uint32_t kNoEventSlot = handoff::kNoEventSlot;

// Most event pairs one session may have.
constexpr int kMaxEventSlots = 1024;

// Most allocations one client may keep mapped at once, and the daemon's
// budget of mappings of all clients together (null: no daemon-wide limit).
struct MappingLimits {
  size_t per_client = 65536;
  Budget* daemon = nullptr;
};

// One mapped allocation of a client. Shared by the client's table and by
// the executors using it; when the last owner lets go, the backend unmaps it
// once the last work that used it finished (the `last_use` event the
// executor records after that work), without blocking anyone. If that work
// never finishes the mapping stays: unmapping memory a kernel may still
// touch would fault the GPU.
class Mapping {
 public:
  Mapping(GpuBackend* backend, int device, MappedMemory memory, void* last_use, std::string what, Budget::Lease lease)
      : backend_(backend),
        device_(device),
        memory_(memory),
        last_use_(last_use),
        what_(std::move(what)),
        lease_(std::move(lease)) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  uint8_t* base() const { return static_cast<uint8_t*>(memory_.address); }
  void* lastUse() const { return last_use_; }
  // The last use could not be recorded: never unmap (a logged leak).
  void keepMapped() { keep_.store(true); }

 private:
  GpuBackend* const backend_;
  const int device_;
  const MappedMemory memory_;
  void* const last_use_;
  const std::string what_;
  const Budget::Lease lease_;  // one of the daemon's mappings
  std::atomic<bool> keep_{false};
};

// A checked tensor reference: its first byte, and the mapping that must
// stay open while work on it is queued.
struct Located {
  uint8_t* data = nullptr;
  std::shared_ptr<Mapping> mapping;
};

class ClientGpu {
 public:
  // Opens the client's ready events and creates as many done events; on
  // failure everything made so far is released.
  static StatusOr<std::unique_ptr<ClientGpu>> attach(GpuBackend* backend, int device, const std::string& device_uuid,
                                                     const v1::CudaAttach& request, const std::string& who,
                                                     MappingLimits limits = {});
  ~ClientGpu();
  ClientGpu(const ClientGpu&) = delete;
  ClientGpu& operator=(const ClientGpu&) = delete;

  int device() const { return device_; }
  const std::string& who() const { return who_; }
  // The rank's connection closed: work waiting on its events ends.
  void detach() { attached_.store(false); }
  bool attached() const { return attached_.load(); }
  const std::string& deviceUuid() const { return device_uuid_; }
  int eventSlots() const { return static_cast<int>(ready_.size()); }
  // Handles of the done events, for the attach reply.
  std::vector<std::string> doneEventHandles() const;

  // Maps an allocation (idempotent for the same id, size and handle). The
  // size the client states must not exceed what the driver reports. cuMem
  // memory (request.chunk_bytes) comes as one descriptor per chunk in `fds`.
  Status addBuffer(const v1::CudaBufferExport& request, std::vector<UniqueFd> fds = {});
  // Forgets an allocation: it is unmapped once no queued work uses it.
  Status removeBuffer(uint64_t buffer_id);
  size_t bufferCount() const;

  // Checks a tensor reference (id, range within the allocation).
  StatusOr<Located> locate(uint64_t buffer_id, uint64_t offset, uint64_t length) const;
  Status check(uint64_t buffer_id, uint64_t offset, uint64_t length) const {
    return locate(buffer_id, offset, length).status();
  }
  Status checkSlot(uint32_t slot) const;
  // Slots checked with checkSlot, other than kNoEventSlot.
  void* readyEvent(uint32_t slot) const { return ready_[slot]; }
  void* doneEvent(uint32_t slot) const { return done_[slot].event; }

 private:
  struct Buffer {
    std::shared_ptr<Mapping> mapping;
    uint64_t bytes = 0;  // as exported (checked against the driver's size)
    std::string handle;  // the IPC handle, or the chunks' sizes
  };
  ClientGpu(GpuBackend* backend, int device, std::string uuid, std::string who, MappingLimits limits)
      : backend_(backend), device_(device), device_uuid_(std::move(uuid)), who_(std::move(who)), limits_(limits) {}
  void releaseAll();
  // Checks an export and maps it: an IPC handle, or cuMem chunks.
  StatusOr<MappedMemory> open(const v1::CudaBufferExport& request, std::vector<UniqueFd> fds);

  GpuBackend* const backend_;
  const int device_;
  const std::string device_uuid_;
  const std::string who_;  // "rank 1 (pid 42, host h)", for messages
  const MappingLimits limits_;
  std::atomic<bool> attached_{true};
  // The event slots: filled by create, emptied by releaseAll once the
  // session is gone (read without mutex_ by the executor meanwhile).
  std::vector<void*> ready_;
  std::vector<SharedEvent> done_;
  mutable Mutex mutex_;
  std::map<uint64_t, Buffer> buffers_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::gpu
