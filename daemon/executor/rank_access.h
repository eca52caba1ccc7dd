// SPDX-License-Identifier: Apache-2.0
// What an executor is given to run a job's collective: the job's ranks on
// this node (their arenas, GPUs and output grants) and its data plane among
// the daemons; and what it returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "daemon/coordinator/request.h"
#include "daemon/executor/data_plane.h"
#include "daemon/gpu/client_gpu.h"
#include "handoff/shm_arena.h"

namespace gradsync::executor {

using coordinator::Response;

// What one member of a response receives besides its buffer contents.
struct MemberResult {
  std::vector<int64_t> output_shape;     // ALLGATHER, ALLTOALL, REDUCESCATTER
  std::vector<int64_t> received_splits;  // ALLTOALL
};

struct ResponseResult {
  Status status;
  std::vector<MemberResult> members;  // parallel to Response::ranks
};

// The executor's window on the job's ranks.
class RankAccess {
 public:
  virtual ~RankAccess() = default;
  // The arena of `rank`; null when the rank is gone.
  virtual const handoff::ShmArena* arena(int rank) = 0;
  // Asks every active member of `response` on this node for `bytes[i]`
  // bytes of output in its arena (shape `shapes[i]`) and waits for the
  // answers (bounded by a deadline, ended by a member's loss). Returns
  // pointers parallel to response.ranks (null for joined or remote
  // members), each already bounds-checked.
  virtual StatusOr<std::vector<uint8_t*>> requestOutputs(const Response& response, const std::vector<uint64_t>& bytes,
                                                         const std::vector<std::vector<int64_t>>& shapes) = 0;
  // Whether `rank` lives on this node.
  virtual bool isLocal(int rank) const { return true; }
  // The GPU state of a local `rank` that attached one (null otherwise). The
  // reference keeps its mappings open while the caller uses them.
  virtual std::shared_ptr<gpu::ClientGpu> gpuOf(int rank) { return nullptr; }
  // The bytes among the job's daemons (a SingleNodeDataPlane on one node).
  virtual DataPlane& dataPlane() = 0;
  virtual const DataPlane& dataPlane() const = 0;
  // A phase of the collective running begins or ends (the job's timeline).
  virtual void phase(const char* name, bool begin) {}
  // Whether the job's timeline records the collective running; a phase of
  // it measured on the GPU (CUDA events read back), from `start` to `end`.
  virtual bool timelineOn() const { return false; }
  virtual void gpuPhase(const char* name, std::chrono::steady_clock::time_point start,
                        std::chrono::steady_clock::time_point end) {}
};

// A phase for RankAccess::phase, from construction to destruction.
class PhaseScope {
 public:
  PhaseScope(RankAccess& access, const char* name) : access_(access), name_(name) { access_.phase(name_, true); }
  ~PhaseScope() { access_.phase(name_, false); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  RankAccess& access_;
  const char* const name_;
};

}  // namespace gradsync::executor
