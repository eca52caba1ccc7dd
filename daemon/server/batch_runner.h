// SPDX-License-Identifier: Apache-2.0
// Runs a job's negotiated batches on this daemon, one at a time (on the
// job's executor thread, or inline on the thread whose submission completed
// one): fusion up to the batch's threshold, then the executors, which see
// the batch through this type (executor::RankAccess): the arenas and GPUs of
// the sessions the batch began with, the output buffers its local ranks
// grant (asked over their sessions, answers through OutputGrants), and the
// job's data plane among the daemons. The job learns each fused response's
// results through a hook. It takes no lock of the job's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/executor/cpu_executor.h"
#include "daemon/executor/gpu_executor.h"
#include "daemon/executor/rank_access.h"
#include "daemon/fusion/fusion_planner.h"
#include "daemon/metrics/job_stats.h"
#include "daemon/peer/peer_data_plane.h"
#include "daemon/server/job_timeline.h"
#include "daemon/server/output_grants.h"
#include "daemon/server/session.h"

namespace gradsync::server {

// The job as a batch began.
struct BatchContext {
  std::map<int, std::shared_ptr<Session>> sessions;  // by rank
  uint64_t epoch = 1;
  uint64_t fusion_threshold_bytes = 0;
  std::optional<std::set<int>> local_ranks;  // nullopt: one node, every rank is local
};

class BatchRunner : private executor::RankAccess {
 public:
  using Clock = std::chrono::steady_clock;
  struct Parts {
    std::string job_id;
    executor::CpuExecutor* executor = nullptr;
    executor::DataPlane* plane = nullptr;
    peer::PeerDataPlane* peer_plane = nullptr;  // null: one node
    OutputGrants* grants = nullptr;
    JobTimeline* timeline = nullptr;
    metrics::JobStats* stats = nullptr;
    Clock::duration grant_timeout = std::chrono::seconds(30);
  };
  // A fused response of the batch ran from `started`, with `results`.
  using Completed =
      std::function<void(const fusion::FusedResponse& fused, const std::vector<executor::ResponseResult>& results,
                         Clock::time_point started)>;

  BatchRunner(Parts parts, Completed completed) : parts_(std::move(parts)), completed_(std::move(completed)) {}

  // Runs `batch` (sequence `sequence` among the daemons) as `context` says.
  void run(const BatchContext& context, std::vector<coordinator::Response> batch, uint64_t sequence);

  // The job's phases (the executors', the data plane's): statistics and
  // the timeline.
  void phase(const char* name, bool begin) override;
  bool timelineOn() const override;
  void gpuPhase(const char* name, std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end) override;

 private:
  // RankAccess, with the batch's context.
  const handoff::ShmArena* arena(int rank) override;
  std::shared_ptr<gpu::ClientGpu> gpuOf(int rank) override;
  StatusOr<std::vector<uint8_t*>> requestOutputs(const coordinator::Response& response,
                                                 const std::vector<uint64_t>& bytes,
                                                 const std::vector<std::vector<int64_t>>& shapes) override;
  bool isLocal(int rank) const override;
  executor::DataPlane& dataPlane() override { return *parts_.plane; }
  const executor::DataPlane& dataPlane() const override { return *parts_.plane; }
  // requestOutputs' first part: asks each local rank of `response` for its
  // output buffer (the answers come through OutputGrants).
  StatusOr<std::vector<OutputGrants::Ask>> askForOutputs(const coordinator::Response& response,
                                                         const std::vector<uint64_t>& bytes,
                                                         const std::vector<std::vector<int64_t>>& shapes,
                                                         const std::string& prefix);

  // In a multi-node job a rank that left elsewhere does not stop a
  // collective already negotiated (the other nodes may have finished it):
  // only a lost local rank (it will never grant) or a stop ends the wait.
  bool endsAtFailure() const { return !context_->local_ranks.has_value(); }

  const Parts parts_;
  const Completed completed_;
  const BatchContext* context_ = nullptr;  // while run() runs
};

}  // namespace gradsync::server
