// SPDX-License-Identifier: Apache-2.0
// A rank's CUDA side: attaches its GPU to the daemon once (event pairs),
// exports each allocation once (a cache keyed by the driver's buffer id, so
// nothing is exported or opened per step), and orders every operation on the
// GPU: the rank's stream records a "ready" event that the daemon awaits; the
// daemon records a "done" event that wait() awaits on the host (or, with
// complete(), that the rank's stream waits on).
//
// Legacy (cudaMalloc) allocations are exported whole by CUDA IPC handle,
// keyed by the driver's buffer id. cuMem/VMM memory (PyTorch's expandable
// segments: one reserved range, many mappings) is exported as a "view": the
// run of mappings under a tensor, one file descriptor each, keyed by its
// first mapping and checked on every use against the mappings' block ids, so
// that a mapping the allocator replaced is exported again, never read
// stale. cudaMallocAsync pools export neither way: such a tensor is copied
// (on its stream) into a buffer of this session (staging_pool.h) that the
// daemon maps instead, and, where the operation writes it, copied back
// after the daemon's done event. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "client/src/cuda/cuda_driver.h"
#include "client/src/cuda/staging_pool.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::client {

// Sends one hand-off request, with `fds` attached, and returns the daemon's
// response.
using HandoffChannel =
    std::function<Status(const v1::HandoffRequest&, v1::HandoffResponse*, const std::vector<int>& fds)>;
using DriverLoader = std::function<StatusOr<std::unique_ptr<CudaDriver>>()>;

struct CudaSessionOptions {
  std::vector<std::string> daemon_gpus;  // from RegisterResponse; empty: the daemon has none
  std::string daemon_name;               // "gradsyncd at /run/gradsync/gradsyncd.sock", for messages
  int event_slots = 256;                 // operations one rank can have in flight on the GPU
  size_t max_cached_buffers = 4096;      // past this, the least recently used export is released
};

class CudaSession {
 public:
  CudaSession(CudaSessionOptions options, DriverLoader loader, HandoffChannel channel);
  ~CudaSession();

  // A tensor in a stream-ordered pool, through a staging buffer.
  struct Staged {
    uint64_t staging = 0;  // the buffer the daemon maps (0: none)
    uint64_t user = 0;     // the caller's memory
    uint64_t bytes = 0;
    bool copy_back = false;  // the operation writes it
  };
  struct Prepared {
    v1::CudaTensorRef ref;
    void* stream = nullptr;
    Staged staged;
  };
  // Makes `bytes` at `data` (device memory) usable by the daemon: attaches,
  // exports the allocation if new (pool memory: copies it to a staging
  // buffer on `stream`), takes an event slot and records the ready event on
  // `stream`. `written`: the operation writes the tensor (allreduce,
  // broadcast), so staged memory is copied back at completion. Errors name
  // the tensor.
  StatusOr<Prepared> prepare(const std::string& name, const void* data, uint64_t bytes, void* stream,
                             bool written = true);
  // A tensor without elements (no memory). With `with_events` (the
  // operation writes an output of this rank's) it takes an event slot like
  // any tensor; without, it needs neither GPU nor events.
  StatusOr<Prepared> prepareEmpty(const std::string& name, void* stream, bool with_events);
  // The caller's output buffer of a CUDA allgather/alltoall/reducescatter:
  // exported like an input (no event slot: the input's orders both; pool
  // memory gets a staging buffer, for which `stream`, the input's, waits).
  struct PreparedOutput {
    v1::CudaTensorRef ref;
    void* stream = nullptr;
    Staged staged;
  };
  StatusOr<PreparedOutput> prepareOutput(const std::string& name, const void* data, uint64_t bytes, void* stream);
  // The operation that took `output` finished (after complete or
  // completeOnHost): with `ok`, staged memory is copied back on its stream.
  Status releaseOutput(const PreparedOutput& output, bool ok);
  // After the operation's Done: `stream` waits for the daemon's done event
  // (also when it failed: work it queued first must finish before the
  // caller reuses its tensors), and the slot is free again.
  Status complete(const Prepared& prepared, bool ok);
  // After the operation's Done: waits on the host until the daemon's done
  // event is reached, then frees the slot; the caller's stream needs no wait
  // (a stream left waiting on another process's event holds the GPU for its
  // time slice while the daemon's work waits for its own: without MPS that
  // costs hundreds of microseconds per rank and operation). `broken` is
  // asked between polls: an error from it ends the wait (the daemon died).
  // Past `limit` the stream waits instead and the call fails, naming `name`.
  Status completeOnHost(const Prepared& prepared, const std::string& name, const std::function<Status()>& broken,
                        std::chrono::milliseconds limit);
  // Forgets every export no operation in flight uses (the daemon unmaps
  // them): call before the allocator returns memory to the driver
  // (torch.cuda.empty_cache()).
  Status releaseExports();

  size_t cachedBuffers() const;
  int freeSlots() const;
  // Attached, and every event slot taken by an operation in flight.
  bool slotsExhausted() const;

 private:
  struct Export {
    uint64_t base = 0;
    uint64_t size = 0;
    uint64_t last_use = 0;
    int in_flight = 0;             // operations referencing it: never evicted meanwhile
    std::vector<uint64_t> blocks;  // a view's mappings' block ids (empty: a legacy allocation)
    bool stale = false;            // a view replaced while in flight: forgotten once idle
  };
  struct Located {
    uint64_t id = 0;
    uint64_t base = 0;
  };
  // The operation's event slot is free again; its export no longer in use;
  // staged memory copied back if `copy`.
  Status releaseSlotLocked(const Prepared& prepared, bool copy) GS_REQUIRES(mutex_);
  // Checks `bytes` at `data` against its allocation and this rank's GPU
  // (attaching on the first CUDA tensor); exports the allocation if new.
  // Pool memory: into `staged` (null: refused), a staging buffer for which
  // `stream` waits, the tensor copied there first if `copy_in`.
  StatusOr<v1::CudaTensorRef> locateLocked(const std::string& name, const void* data, uint64_t bytes,
                                           Staged* staged = nullptr, void* stream = nullptr, bool copy_in = false)
      GS_REQUIRES(mutex_);
  // Staged memory back to the caller's (if `copy`), its buffer free for
  // another operation after the work on `stream`.
  Status unstageLocked(const Staged& staged, void* stream, bool copy) GS_REQUIRES(mutex_);
  // A free event slot whose ready event is now recorded on `stream`.
  StatusOr<uint32_t> takeSlotLocked(const std::string& name, void* stream) GS_REQUIRES(mutex_);
  Status attachLocked(const PointerInfo& info) GS_REQUIRES(mutex_);
  StatusOr<uint64_t> exportLocked(const std::string& name, const PointerInfo& info) GS_REQUIRES(mutex_);
  // The view of cuMem mappings under [start, start + bytes), exported if new
  // or if a mapping under it changed.
  StatusOr<Located> exportViewLocked(const std::string& name, const PointerInfo& info, uint64_t start, uint64_t bytes)
      GS_REQUIRES(mutex_);
  // Sends the export of `chunks` as view `id`.
  Status sendViewLocked(uint64_t id, const PointerInfo& info, const std::vector<MemoryChunk>& chunks)
      GS_REQUIRES(mutex_);
  // One operation less uses the export; a stale view is forgotten once idle.
  void unuseLocked(uint64_t id) GS_REQUIRES(mutex_);
  // Tells the daemon to unmap the export and drops it (best effort).
  Status forgetLocked(std::map<uint64_t, Export>::iterator it) GS_REQUIRES(mutex_);
  void evictLocked() GS_REQUIRES(mutex_);

  const CudaSessionOptions options_;
  DriverLoader loader_;
  HandoffChannel channel_;
  mutable Mutex mutex_;
  std::unique_ptr<CudaDriver> driver_ GS_GUARDED_BY(mutex_);
  std::string device_uuid_ GS_GUARDED_BY(mutex_);
  void* context_ GS_GUARDED_BY(mutex_) = nullptr;
  std::vector<void*> ready_ GS_GUARDED_BY(mutex_);
  std::vector<void*> done_ GS_GUARDED_BY(mutex_);
  std::vector<uint32_t> free_slots_ GS_GUARDED_BY(mutex_);
  std::map<uint64_t, Export> exports_ GS_GUARDED_BY(mutex_);  // by buffer id (or view id)
  std::map<uint64_t, uint64_t> views_ GS_GUARDED_BY(mutex_);  // a view's id by its first mapping's address
  uint64_t next_view_id_ GS_GUARDED_BY(mutex_);
  uint64_t use_clock_ GS_GUARDED_BY(mutex_) = 0;
  StagingPool staging_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::client
