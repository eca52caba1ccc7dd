// SPDX-License-Identifier: Apache-2.0
// What one job's timeline records. Rows are tensors; NEGOTIATE_<COLLECTIVE>
// spans from the first rank's request to the response (with an instant per
// rank as it arrives: the waiting for ranks), then <COLLECTIVE> spans the
// execution, with the phases the executor and the cross-node transfers
// report inside it. Negotiation is recorded where it happens (the leader),
// the execution on every node. Nothing is recorded, and no lock taken,
// while no timeline runs.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "daemon/coordinator/request.h"
#include "daemon/executor/rank_access.h"
#include "daemon/fusion/fusion_planner.h"
#include "daemon/timeline/timeline.h"

namespace gradsync::server {

class JobTimeline {
 public:
  // A timeline into `file` (a regular file opened for writing;
  // INVALID_ARGUMENT otherwise), in place of one that runs.
  Status start(UniqueFd file, bool mark_cycles) GS_EXCLUDES(mutex_);
  void stop() GS_EXCLUDES(mutex_);

  // Negotiation: a rank's request arrived; a collective was negotiated.
  void requestArrived(const coordinator::Request& request) GS_EXCLUDES(mutex_) {
    requestArrived(request.name, request.type, request.rank);
  }
  void requestArrived(const std::string& name, CollectiveType type, int rank) GS_EXCLUDES(mutex_);
  void negotiated(const std::string& name, CollectiveType type) GS_EXCLUDES(mutex_);

  // Execution (executor thread): a fused response begins, a phase inside it
  // begins or ends, it ends with `results`.
  void executionBegins(const fusion::FusedResponse& fused);
  void phase(const char* name, bool begin);
  void executionEnds(const fusion::FusedResponse& fused, const std::vector<executor::ResponseResult>& results);
  // Whether the fused response running is recorded; a GPU phase of it
  // measured with CUDA events (executor thread).
  bool recording() const { return executing_ != nullptr; }
  void gpuSpan(const char* name, std::chrono::steady_clock::time_point start,
               std::chrono::steady_clock::time_point end);

 private:
  std::shared_ptr<timeline::Timeline> current() const GS_EXCLUDES(mutex_);

  mutable Mutex mutex_;
  std::shared_ptr<timeline::Timeline> timeline_ GS_GUARDED_BY(mutex_);
  std::atomic<bool> on_{false};
  std::set<std::string> negotiating_ GS_GUARDED_BY(mutex_);  // tensors with an open negotiation row
  // The fused response running and its timeline (executor thread only).
  std::shared_ptr<timeline::Timeline> executing_;
  std::vector<std::string> executing_names_;
};

}  // namespace gradsync::server
