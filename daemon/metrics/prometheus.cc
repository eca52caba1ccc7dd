// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/prometheus.h"

#include "base/dtype.h"
#include "daemon/metrics/exposition.h"

namespace gradsync::metrics {
namespace {

// Label values of collectives: "process set add" -> "process_set_add".
std::string collectiveLabel(CollectiveType type) {
  std::string name = collectiveName(type);
  for (char& c : name) {
    if (c == ' ') c = '_';
  }
  return name;
}

void daemonMetrics(const v1::GetStatusResponse& status, Exposition* out) {
  out->gauge("gradsync_build_info", "The daemon's version (the value is always 1).", {{"version", status.version()}},
             1);
  out->gauge("gradsync_uptime_seconds", "Seconds since the daemon started.", {}, status.uptime_seconds());
  out->gauge("gradsync_jobs", "Jobs the daemon serves now.", {}, status.jobs());
  out->gauge("gradsync_gpus", "CUDA devices the daemon sees.", {}, status.cuda_devices());
  out->gauge("gradsync_nccl_version", "NCCL version loaded (e.g. 22809 for 2.28.9); 0 when none could be.", {},
             status.nccl_version());
  out->gauge("gradsync_draining", "1 while the daemon refuses new jobs and waits for running ones to end.", {},
             status.draining() ? 1 : 0);
}

void rankMetrics(const v1::JobInfo& job, const Labels& labels, Exposition* out) {
  int connected = 0;
  uint64_t arena_bytes = 0;
  for (const auto& rank : job.ranks()) {
    if (rank.connected()) ++connected;
    arena_bytes += rank.arena_bytes();
  }
  out->gauge("gradsync_job_ranks", "Ranks in the job, on every node.", labels, job.size());
  out->gauge("gradsync_job_local_ranks", "Ranks of the job on this node.", labels, job.local_size());
  out->gauge("gradsync_job_connected_ranks", "Local ranks whose session stream is open.", labels, connected);
  out->gauge("gradsync_job_arena_bytes", "Shared-memory arena bytes the job's local ranks handed over.", labels,
             static_cast<double>(arena_bytes));
  out->gauge("gradsync_job_healthy", "0 once a rank died or left: the job fails every new collective.", labels,
             job.healthy() ? 1 : 0);
  out->gauge("gradsync_job_tensors_in_flight", "Collectives enqueued by a rank and not yet done.", labels,
             job.tensors_in_flight());
  out->gauge("gradsync_job_fusion_threshold_bytes",
             "Largest fused response the job runs with now (autotune may change it; 1: no fusion).", labels,
             static_cast<double>(job.tuning().fusion_threshold_bytes()));
}

void collectiveMetrics(const v1::JobInfo& job, const Labels& labels, Exposition* out) {
  for (const auto& stats : job.collective_stats()) {
    Labels l = labels;
    l.emplace_back("collective", collectiveLabel(stats.type()));
    l.emplace_back("dtype", stats.dtype() == v1::DATA_TYPE_UNSPECIFIED ? "none" : dataTypeName(stats.dtype()));
    out->counter("gradsync_operations_total", "Collectives of local ranks completed, by collective and dtype.", l,
                 static_cast<double>(stats.operations()));
    out->counter("gradsync_operation_bytes_total", "Input bytes of the completed collectives of local ranks.", l,
                 static_cast<double>(stats.bytes()));
  }
  for (const auto& latency : job.latency()) {
    Labels l = labels;
    l.emplace_back("collective", collectiveLabel(latency.type()));
    out->histogram("gradsync_operation_latency_seconds", "From a local rank's enqueue to its collective's completion.",
                   l, latency.seconds());
  }
  for (const auto& error : job.errors_by_cause()) {
    Labels l = labels;
    l.emplace_back("cause", error.cause());
    out->counter("gradsync_operation_errors_total",
                 "Collectives of local ranks that failed or were refused, by cause (status code).", l,
                 static_cast<double>(error.count()));
  }
  out->counter("gradsync_queued_seconds_total",
               "Seconds local requests waited from enqueue until their fused response started: negotiation and "
               "the other ranks.",
               labels, job.queued_seconds());
  for (const auto& phase : job.phases()) {
    Labels l = labels;
    l.emplace_back("phase", phase.name());
    out->counter("gradsync_phase_seconds_total", "Seconds spent in each execution phase (as in the timeline).", l,
                 phase.seconds());
  }
  out->counter("gradsync_fused_responses_total", "Fused responses executed.", labels,
               static_cast<double>(job.fused_responses()));
  out->histogram("gradsync_fused_response_bytes", "Sizes of the fused responses executed.", labels,
                 job.fused_response_bytes());
  out->counter("gradsync_response_cache_hits_total",
               "Responses and forwarded requests that travelled as response-cache ids.", labels,
               static_cast<double>(job.cache_hits()));
  out->counter("gradsync_stall_warnings_total", "Stall warnings: a collective some ranks have not submitted.", labels,
               static_cast<double>(job.stall_warnings()));
}

void nodeMetrics(const v1::JobInfo& job, const Labels& labels, Exposition* out) {
  if (job.nodes().empty()) return;
  out->gauge("gradsync_job_nodes", "Daemons in a job across nodes.", labels, job.nodes_size());
  out->gauge("gradsync_job_epoch", "Membership epoch of a job across nodes (0 while forming).", labels,
             static_cast<double>(job.epoch()));
  out->counter("gradsync_coordination_sent_bytes_total", "Coordination bytes this daemon sent for the job.", labels,
               static_cast<double>(job.coordination_bytes_sent()));
  out->counter("gradsync_coordination_received_bytes_total", "Coordination bytes this daemon received for the job.",
               labels, static_cast<double>(job.coordination_bytes_received()));
  out->counter("gradsync_coordination_messages_total", "Coordination messages of this daemon for the job.", labels,
               static_cast<double>(job.coordination_messages()));
  for (const auto& node : job.nodes()) {
    if (node.self()) continue;
    Labels l = labels;
    l.emplace_back("node", std::to_string(node.cross_rank()));
    l.emplace_back("peer", node.peer_address());
    out->counter("gradsync_peer_sent_bytes_total", "Data-plane bytes sent to another daemon of the job.", l,
                 static_cast<double>(node.bytes_sent()));
    out->counter("gradsync_peer_received_bytes_total", "Data-plane bytes received from another daemon of the job.", l,
                 static_cast<double>(node.bytes_received()));
    out->gauge("gradsync_peer_throughput_bytes_per_second",
               "Data-plane bytes per second with that daemon over the time spent in transfers.", l,
               node.throughput_gbps() * 1e9);
    out->counter("gradsync_peer_failed_transfers_total", "Data-plane transfers with that daemon that failed.", l,
                 static_cast<double>(node.failed_transfers()));
    if (node.heartbeat_age_ms() >= 0) {
      out->gauge("gradsync_peer_heartbeat_age_seconds",
                 "Seconds since this daemon last heard from that daemon over the coordination stream.", l,
                 node.heartbeat_age_ms() / 1000.0);
    }
  }
}

}  // namespace

std::string renderPrometheus(const v1::GetStatusResponse& status, const v1::ListJobsResponse& jobs) {
  Exposition out;
  daemonMetrics(status, &out);
  for (const auto& job : jobs.jobs()) {
    if (job.ended()) continue;
    const Labels labels = {{"job_id", job.job_id()}};
    rankMetrics(job, labels, &out);
    collectiveMetrics(job, labels, &out);
    nodeMetrics(job, labels, &out);
  }
  return out.text();
}

}  // namespace gradsync::metrics
