// SPDX-License-Identifier: Apache-2.0
// One job's use of the node's GPUs, for its executor thread: the job's own
// stream and fusion buffer on each GPU (so that jobs sharing a GPU never wait
// on each other), its host staging buffer, and the members of a response
// resolved to device addresses by GPU, with their ready events awaited on
// the host and their done events recorded on the job's streams.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "daemon/executor/rank_access.h"
#include "daemon/gpu/client_gpu.h"
#include "daemon/gpu/device_ops.h"

namespace gradsync::executor {

class JobGpus {
 public:
  // How long a live rank's GPU work producing a tensor may take once every
  // rank asked for the collective.
  static constexpr std::chrono::seconds kReadyWaitLimit{60};

  // The present members of a response, resolved to device addresses.
  struct Member {
    std::shared_ptr<gpu::ClientGpu> gpu;
    uint8_t* data = nullptr;
    uint8_t* output = nullptr;  // allgather, alltoall, reducescatter
    // Kept open while this batch's work on them is queued; their last-use
    // events are recorded with the done events.
    std::shared_ptr<gpu::Mapping> data_mapping;
    std::shared_ptr<gpu::Mapping> output_mapping;
    uint64_t output_length = 0;
    uint32_t slot = 0;
    int rank = -1;
  };
  struct Members {
    std::vector<Member> list;
    int device = -1;
    void* stream = nullptr;  // cudaStream_t
  };

  explicit JobGpus(gpu::DeviceOps* ops) : ops_(ops) {}
  ~JobGpus();  // the fusion buffers, then the streams
  JobGpus(const JobGpus&) = delete;
  JobGpus& operator=(const JobGpus&) = delete;

  // The members by GPU, in device order; members without memory go with
  // the first (or alone, with device -1).
  StatusOr<std::vector<Members>> resolveByDevice(const Response& r, RankAccess& access);
  // Waits on the host until every member's ready event is reached; fails
  // (naming the rank) when a rank disconnects first or kReadyWaitLimit passes.
  Status waitReady(const Members& m);
  // waitReady for each group, on its device; `waited` counts those awaited
  // (their done events must be recorded whatever happens next).
  Status waitReadyOnGpus(const std::vector<Members>& groups, size_t* waited);
  // Records every member's last-use and done events on the group's stream
  // (all of them, even after one fails).
  Status recordDone(const Members& m);
  // Once the ready events were awaited, the done events are recorded
  // whatever happened since: `status`, or recordDone's error.
  Status recordDoneAfter(const Members& m, Status status);
  // recordDoneAfter for the first `waited` of `groups` (those whose ready
  // events were awaited), each on its device.
  Status recordDoneOnGpus(const std::vector<Members>& groups, size_t waited, Status status);

  // This job's stream and fusion buffer on `device` (made on first use).
  StatusOr<void*> streamFor(int device);
  StatusOr<gpu::GrowingBuffer*> fusionFor(int device);
  // The staging buffer, at least `bytes` (no copy from it is in flight
  // between batches: the staged paths wait for theirs, drainStaging).
  uint8_t* staging(size_t bytes);
  // Waits until every group's copies from the staging buffer are done;
  // `status`, or the first wait's error.
  Status drainStaging(const std::vector<Members>& groups, Status status);

  // Copies the members' inputs to `host`, each at offset[its request]
  // (their device selected).
  Status stageInputs(const Response& r, const Members& m, const std::vector<size_t>& index,
                     const std::vector<size_t>& offset, uint8_t* host);
  // `groups` with the one on `lead` first (an empty one added if no local
  // rank uses that GPU).
  StatusOr<std::vector<Members>> withLead(std::vector<Members> groups, int lead);
  // The first group's GPU (-1: none, or no local rank holds memory).
  static int firstDevice(const std::vector<Members>& groups);

  // The index in r.requests of each member, and the entries of `all`
  // (parallel to r.requests) that are the members'.
  static std::vector<size_t> memberIndices(const Response& r, const Members& m);
  static std::vector<uint64_t> localBytes(const Members& m, const std::vector<size_t>& index,
                                          const std::vector<uint64_t>& all);
  // Whether each member's output (allgather, alltoall, reducescatter) is
  // the result's size, `bytes` (by member); an error naming the rank if not.
  static Status checkOutputs(const Response& r, const Members& m, const std::vector<uint64_t>& bytes);
  // memberIndices of each group, once checkOutputs passed for each
  // (`bytes`: parallel to r.requests).
  static StatusOr<std::vector<std::vector<size_t>>> checkedIndices(const Response& r,
                                                                   const std::vector<Members>& groups,
                                                                   const std::vector<uint64_t>& bytes);

 private:
  Status waitForEvent(const gpu::ClientGpu& client, void* event);

  gpu::DeviceOps* const ops_;
  std::map<int, void*> streams_;
  std::map<int, std::unique_ptr<gpu::GrowingBuffer>> fusion_;
  // Host memory for transfers between daemons (pageable: they go at network
  // speed, and freeing pinned memory would wait for the whole device).
  std::vector<uint8_t> staging_;
};

}  // namespace gradsync::executor
