// SPDX-License-Identifier: Apache-2.0
#include "tools/gradsyncctl/stats_view.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "base/dtype.h"
#include "tools/gradsyncctl/format.h"

namespace gradsync::ctl {
namespace {

std::string fixed(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

// 0.000042 -> "42us", 0.0123 -> "12.3ms", 2.5 -> "2.50s".
std::string formatLatency(double seconds) {
  if (seconds <= 0) return "-";
  if (seconds < 1e-3) return fixed("%.0fus", seconds * 1e6);
  if (seconds < 1) return fixed("%.1fms", seconds * 1e3);
  return fixed("%.2fs", seconds);
}

std::string padded(std::string text, size_t width) {
  if (text.size() < width) text.resize(width, ' ');
  return text;
}

std::string rightAligned(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// The job's latency histogram of `type` (empty when none).
v1::Histogram latencyOf(const v1::JobInfo& job, CollectiveType type) {
  for (const auto& latency : job.latency()) {
    if (latency.type() == type) return latency.seconds();
  }
  return v1::Histogram();
}

const v1::JobInfo* findJob(const v1::ListJobsResponse& jobs, const std::string& id) {
  for (const auto& job : jobs.jobs()) {
    if (job.job_id() == id) return &job;
  }
  return nullptr;
}

uint64_t minus(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }

std::string percentiles(const v1::Histogram& h) {
  return rightAligned(formatLatency(histogramQuantile(h, 0.5)), 9) +
         rightAligned(formatLatency(histogramQuantile(h, 0.9)), 9) +
         rightAligned(formatLatency(histogramQuantile(h, 0.99)), 9);
}

// A multi-node job's control plane at this daemon: coordination messages
// and bytes per operation, the cache hit rate, the largest message, the
// steady state's rounds, and the allreduces by algorithm.
std::string controlPlane(const v1::JobInfo& job) {
  const double ops = std::max<double>(1, static_cast<double>(job.operations_done()));
  const double rounds = std::max<double>(1, static_cast<double>(job.steady_rounds()));
  std::string out =
      "  control plane: " + fixed("%.2f", static_cast<double>(job.coordination_messages()) / ops) + " messages and " +
      formatBytes(static_cast<uint64_t>(
          static_cast<double>(job.coordination_bytes_sent() + job.coordination_bytes_received()) / ops)) +
      " per operation through the leader, largest message " + formatBytes(job.largest_coordination_message()) +
      "; cache hits " + std::to_string(job.cache_hits()) + "\n";
  out += "  steady-state rounds: " + std::to_string(job.steady_rounds()) + ", " +
         fixed("%.1f", static_cast<double>(job.steady_round_messages()) / rounds) + " messages" +
         (job.steady_round_message_bytes() > 0 ? " of " + formatBytes(job.steady_round_message_bytes())
                                               : " (through the leader: counted above too)") +
         " sent per round, " + std::to_string(job.steady_round_collectives()) + " collectives run after them\n";
  out += "  allreduces among daemons: direct " + std::to_string(job.allreduces_direct()) + ", recursive doubling " +
         std::to_string(job.allreduces_doubling()) + ", ring " + std::to_string(job.allreduces_ring()) +
         ", halving-doubling " + std::to_string(job.allreduces_halving()) + "; chosen by " +
         (job.link_bytes_per_second() > 0 ? "the links measured: latency " + fixed("%.1f", job.link_latency_us()) +
                                                " us, " + fixed("%.1f", job.link_message_us()) + " us per message, " +
                                                fixed("%.2f", job.link_bytes_per_second() / 1e9) + " GB/s"
                                          : std::string("the fixed cost of a message (no links measured)")) +
         "\n";
  return out;
}

}  // namespace

double histogramQuantile(const v1::Histogram& histogram, double q) {
  if (histogram.count() == 0 || histogram.counts_size() == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(histogram.count());
  double below = 0;
  for (int i = 0; i < histogram.counts_size(); ++i) {
    const double in_bucket = static_cast<double>(histogram.counts(i));
    if (below + in_bucket >= rank && in_bucket > 0) {
      if (i >= histogram.upper_bounds_size()) {  // the unbounded bucket
        return histogram.upper_bounds_size() > 0 ? histogram.upper_bounds(histogram.upper_bounds_size() - 1) : 0;
      }
      const double lower = i == 0 ? 0 : histogram.upper_bounds(i - 1);
      const double upper = histogram.upper_bounds(i);
      return lower + (upper - lower) * (rank - below) / in_bucket;
    }
    below += in_bucket;
  }
  return histogram.upper_bounds_size() > 0 ? histogram.upper_bounds(histogram.upper_bounds_size() - 1) : 0;
}

v1::Histogram histogramDelta(const v1::Histogram& now, const v1::Histogram& before) {
  const bool comparable = before.counts_size() == now.counts_size() && before.count() <= now.count();
  if (!comparable) return now;
  v1::Histogram delta = now;
  for (int i = 0; i < now.counts_size(); ++i) {
    if (now.counts(i) < before.counts(i)) return now;  // reset
    delta.set_counts(i, now.counts(i) - before.counts(i));
  }
  delta.set_count(now.count() - before.count());
  delta.set_sum(now.sum() - before.sum());
  return delta;
}

std::string formatStats(const v1::ListJobsResponse& jobs) {
  if (jobs.jobs_size() == 0) return "no jobs\n";
  std::string out;
  for (const auto& job : jobs.jobs()) {
    out += "job " + job.job_id() + "\n";
    out += "  " + padded("collective", 15) + padded("dtype", 10) + rightAligned("ops", 10) + rightAligned("bytes", 12) +
           rightAligned("p50", 9) + rightAligned("p90", 9) + rightAligned("p99", 9) + "\n";
    for (const auto& stats : job.collective_stats()) {
      out += "  " + padded(collectiveName(stats.type()), 15) +
             padded(stats.dtype() == v1::DATA_TYPE_UNSPECIFIED ? "none" : dataTypeName(stats.dtype()), 10) +
             rightAligned(std::to_string(stats.operations()), 10) + rightAligned(formatBytes(stats.bytes()), 12) +
             percentiles(latencyOf(job, stats.type())) + "\n";
    }
    if (job.collective_stats_size() == 0) out += "  (no collective completed yet)\n";
    out += "  fused responses: " + std::to_string(job.fused_responses()) + ", median size " +
           formatBytes(static_cast<uint64_t>(histogramQuantile(job.fused_response_bytes(), 0.5))) +
           "; response-cache hits: " + std::to_string(job.cache_hits()) + "\n";
    if (!job.nodes().empty()) out += controlPlane(job);
    out += "  queued (negotiation, other ranks): " + fixed("%.3f s", job.queued_seconds()) + "\n";
    if (job.phases_size() > 0) {
      out += "  phases:";
      for (const auto& phase : job.phases()) out += " " + phase.name() + " " + fixed("%.3fs", phase.seconds());
      out += "\n";
    }
    out += "  errors: " + std::to_string(job.errors());
    for (const auto& error : job.errors_by_cause()) {
      out += (&error == &job.errors_by_cause(0) ? " (" : ", ") + error.cause() + " " + std::to_string(error.count());
    }
    out += job.errors_by_cause_size() > 0 ? ")\n" : "\n";
    out += "  stall warnings: " + std::to_string(job.stall_warnings()) + "\n";
  }
  return out;
}

std::string formatTop(const v1::GetStatusResponse& status, const v1::ListJobsResponse& before,
                      const v1::ListJobsResponse& now, double seconds) {
  seconds = std::max(seconds, 1e-3);
  std::string out = "gradsyncd " + status.version() + " on " + status.hostname() + ", pid " +
                    std::to_string(status.pid()) + ", up " + formatDuration(status.uptime_seconds()) + ", " +
                    std::to_string(now.jobs_size()) + (now.jobs_size() == 1 ? " job" : " jobs") + ", " +
                    std::to_string(status.cuda_devices()) + " GPUs; every " + fixed("%.1f s", seconds) + "\n\n";
  out += padded("JOB", 20) + rightAligned("RANKS", 7) + rightAligned("OPS/S", 10) + rightAligned("BYTES/S", 12) +
         rightAligned("P50", 9) + rightAligned("P90", 9) + rightAligned("P99", 9) + rightAligned("INFLIGHT", 10) +
         rightAligned("STALLS", 8) + rightAligned("ERRORS", 8) + "\n";
  for (const auto& job : now.jobs()) {
    const v1::JobInfo* old = findJob(before, job.job_id());
    const v1::JobInfo empty;
    const v1::JobInfo& prev = old != nullptr ? *old : empty;
    const double ops = static_cast<double>(minus(job.operations_done(), prev.operations_done())) / seconds;
    const double bytes = static_cast<double>(minus(job.bytes_done(), prev.bytes_done())) / seconds;
    // Latency over the interval, every collective together.
    v1::Histogram all;
    for (const auto& latency : job.latency()) {
      const v1::Histogram delta = histogramDelta(latency.seconds(), latencyOf(prev, latency.type()));
      if (all.counts_size() == 0) {
        all = delta;
        continue;
      }
      if (delta.counts_size() != all.counts_size()) continue;
      for (int i = 0; i < delta.counts_size(); ++i) all.set_counts(i, all.counts(i) + delta.counts(i));
      all.set_count(all.count() + delta.count());
      all.set_sum(all.sum() + delta.sum());
    }
    std::string name = job.job_id();
    if (name.size() > 19) name = name.substr(0, 18) + "~";
    out += padded(name, 20) + rightAligned(std::to_string(job.local_size()) + "/" + std::to_string(job.size()), 7) +
           rightAligned(fixed("%.1f", ops), 10) + rightAligned(formatBytes(static_cast<uint64_t>(bytes)), 12) +
           percentiles(all) + rightAligned(std::to_string(job.tensors_in_flight()), 10) +
           rightAligned(std::to_string(minus(job.stall_warnings(), prev.stall_warnings())), 8) +
           rightAligned(std::to_string(minus(job.errors(), prev.errors())), 8) + "\n";
    if (!job.healthy()) out += "  unhealthy: " + job.last_error() + "\n";
  }
  if (now.jobs_size() == 0) out += "(no jobs)\n";
  return out;
}

}  // namespace gradsync::ctl
