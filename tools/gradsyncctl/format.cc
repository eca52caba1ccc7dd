// SPDX-License-Identifier: Apache-2.0
#include "tools/gradsyncctl/format.h"

#include <ctime>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string_view>
#include <vector>

namespace gradsync::ctl {
namespace {

using google::protobuf::FieldDescriptor;

std::string printfString(const char* format, ...) __attribute__((format(printf, 1, 2)));

std::string printfString(const char* format, ...) {
  char buffer[256];
  va_list args;
  va_start(args, format);
  int n = std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  if (n < 0) return std::string();
  return std::string(buffer, static_cast<size_t>(n) < sizeof(buffer) ? n : sizeof(buffer) - 1);
}

// Columns where values start, past the longest label.
constexpr size_t kStatusWidth = 14;  // "cuda driver:  "
constexpr size_t kJobWidth = 22;     // "  tensors in flight:  "

const char* yesNo(bool value) { return value ? "yes" : "no"; }

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "<indent>label:" padded so that values start at column `width`.
void appendLine(std::string* out, std::string_view label, const std::string& value, size_t width, const char* indent) {
  std::string line = indent;
  line += label;
  line += ':';
  if (line.size() < width)
    line.resize(width, ' ');
  else
    line += ' ';
  *out += line + value + "\n";
}

// A string as a quoted text-format literal, so that "" and control
// characters stay visible.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += printfString("\\%03o", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string bytesWithUnits(uint64_t bytes) {
  if (bytes < 1024) return formatBytes(bytes);
  return std::to_string(bytes) + " (" + formatBytes(bytes) + ")";
}

// One scalar DaemonConfig field as text (DaemonConfig has no repeated or
// message fields; anything else reads as its type name so that a future
// field is at least visible).
std::string configValue(const google::protobuf::Message& config, const FieldDescriptor& field) {
  const auto* reflection = config.GetReflection();
  if (field.is_repeated()) return "[" + std::to_string(reflection->FieldSize(config, &field)) + " values]";
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return quoted(reflection->GetString(config, &field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return reflection->GetBool(config, &field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(reflection->GetInt32(config, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(reflection->GetInt64(config, &field));
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t value = reflection->GetUInt32(config, &field);
      if (field.name() == "socket_mode") return printfString("%" PRIu32 " (0%03" PRIo32 ")", value, value);
      if (endsWith(field.name(), "_bytes")) return bytesWithUnits(value);
      return std::to_string(value);
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t value = reflection->GetUInt64(config, &field);
      if (endsWith(field.name(), "_bytes")) return bytesWithUnits(value);
      return std::to_string(value);
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return printfString("%g", reflection->GetDouble(config, &field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return printfString("%g", static_cast<double>(reflection->GetFloat(config, &field)));
    case FieldDescriptor::CPPTYPE_ENUM:
      return reflection->GetEnum(config, &field)->name();
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "{" + reflection->GetMessage(config, &field).ShortDebugString() + "}";
  }
  return "?";
}

// Left-aligned columns separated by two spaces, indented by `indent`.
std::string formatTable(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string formatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  // 1023.5 and up would print as "1024": move to the next unit instead.
  while (value >= 1023.5 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024.0;
    ++unit;
  }
  // Three significant digits: 1.50 KiB, 15.0 MiB, 150 GiB.
  const char* format = value < 10.0 ? "%.2f %s" : value < 100.0 ? "%.1f %s" : "%.0f %s";
  return printfString(format, value, kUnits[unit]);
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  uint64_t total = static_cast<uint64_t>(seconds);
  uint64_t days = total / 86400;
  uint64_t hours = total / 3600 % 24;
  uint64_t minutes = total / 60 % 60;
  uint64_t secs = total % 60;
  if (days > 0) {
    return printfString("%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", days, hours, minutes, secs);
  }
  if (hours > 0) return printfString("%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", hours, minutes, secs);
  if (minutes > 0) return printfString("%" PRIu64 "m %02" PRIu64 "s", minutes, secs);
  return printfString("%" PRIu64 "s", secs);
}

std::string formatConfig(const v1::DaemonConfig& config) {
  const auto* descriptor = config.GetDescriptor();
  size_t width = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    width = std::max(width, descriptor->field(i)->name().size());
  }
  std::string out;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor& field = *descriptor->field(i);
    appendLine(&out, field.name(), configValue(config, field), width + 4, "  ");
  }
  return out;
}

std::string formatStatus(const v1::GetStatusResponse& status, const std::string& socket_path) {
  std::string out;
  auto line = [&out](const char* label, const std::string& value) { appendLine(&out, label, value, kStatusWidth, ""); };
  line("version", status.version());
  line("uptime", formatDuration(status.uptime_seconds()));
  line("pid", std::to_string(status.pid()));
  line("hostname", status.hostname());
  line("socket", socket_path);
  if (status.draining()) line("draining", "yes: no new jobs; exits when the running ones have ended");
  line("peer", status.peer_address().empty() ? std::string("disabled (single-node jobs only)") : status.peer_address());
  line("gpus", status.gpus().empty()
                   ? "none" + (status.gpu_note().empty() ? std::string() : " (" + status.gpu_note() + ")")
                   : std::to_string(status.gpus_size()));
  for (const auto& gpu : status.gpus()) {
    out += printfString("  %d  %s  %s  %s  compute mode %s  PCI %s  NUMA %s\n", gpu.index(), gpu.uuid().c_str(),
                        gpu.name().c_str(), formatBytes(gpu.total_memory_bytes()).c_str(), gpu.compute_mode().c_str(),
                        gpu.pci_bus_id().c_str(),
                        gpu.numa_node() < 0 ? "unknown" : std::to_string(gpu.numa_node()).c_str());
    if (gpu.peers_size() == 0) continue;
    std::string links;
    for (const auto& peer : gpu.peers()) {
      links += printfString("%s%d %s", links.empty() ? "" : ", ", peer.index(),
                            !peer.access() ? "none"
                            : peer.performance_rank() < 0
                                ? "direct"
                                : ("direct, rank " + std::to_string(peer.performance_rank())).c_str());
    }
    out += "     peers: " + links + "\n";
  }
  if (status.cuda_driver_version() > 0) {
    line("cuda driver", std::to_string(status.cuda_driver_version() / 1000) + "." +
                            std::to_string(status.cuda_driver_version() % 1000 / 10));
  }
  line("mps", status.mps() ? "on (" + status.mps_pipe_directory() + ")" : std::string("off"));
  const int nccl = status.nccl_version();
  line("nccl", nccl == 0
                   ? "unavailable" + (status.nccl_note().empty() ? std::string() : " (" + status.nccl_note() + ")")
                   : std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                         std::to_string(nccl % 100) + " (" + status.nccl_library() + ")");
  line("jobs", std::to_string(status.jobs()));
  out += "config:\n";
  out += formatConfig(status.config());
  return out;
}

namespace {

std::string fusionOf(uint64_t threshold_bytes) {
  return threshold_bytes <= 1 ? std::string("no fusion") : "up to " + formatBytes(threshold_bytes);
}

// Where autotune stands: "tuning the fusion threshold, sample 12 of 53",
// "done after 53 samples: 512 MB/s (the initial setting: 420 MB/s)".
std::string autotuneOf(const v1::JobTuning& tuning) {
  std::string out = tuning.phase();
  if (tuning.samples_planned() == 0) return out;  // a follower: the leader tunes
  if (tuning.phase() != "done") {
    return out + ", sample " + std::to_string(tuning.samples()) + " of " + std::to_string(tuning.samples_planned());
  }
  double best = 0;
  for (const auto& trial : tuning.trials()) best = std::max(best, trial.bytes_per_second());
  out += " after " + std::to_string(tuning.samples()) + " samples: " + printfString("%.0f MB/s", best / 1e6);
  if (tuning.trials_size() > 0) {
    out += printfString(" (the initial setting: %.0f MB/s)", tuning.trials(0).bytes_per_second() / 1e6);
  }
  return out;
}

}  // namespace

std::string formatRankTable(const v1::JobInfo& job) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"RANK", "LOCAL", "PID", "HOST", "CONNECTED", "JOINED", "ARENA", "GPU", "GPU BUFFERS"});
  for (const auto& rank : job.ranks()) {
    // Where its CUDA tensors go; "-" for a rank of CPU tensors only.
    const bool gpu = !rank.gpu_uuid().empty();
    rows.push_back({std::to_string(rank.rank()), std::to_string(rank.local_rank()), std::to_string(rank.pid()),
                    rank.hostname().empty() ? "-" : rank.hostname(), yesNo(rank.connected()), yesNo(rank.joined()),
                    formatBytes(rank.arena_bytes()),
                    gpu ? std::to_string(rank.gpu()) + " (" + rank.gpu_uuid() + ")" : "-",
                    gpu ? std::to_string(rank.gpu_buffers()) : "-"});
  }
  return formatTable(rows, "    ");
}

std::string formatJobs(const v1::ListJobsResponse& jobs) {
  if (jobs.jobs_size() == 0) return "no jobs\n";
  std::string out;
  auto line = [&out](const char* label, const std::string& value) { appendLine(&out, label, value, kJobWidth, "  "); };
  for (int i = 0; i < jobs.jobs_size(); ++i) {
    const v1::JobInfo& job = jobs.jobs(i);
    if (i > 0) out += "\n";
    out += "job " + job.job_id() + "\n";
    line("size / local size", std::to_string(job.size()) + " / " + std::to_string(job.local_size()));
    line("healthy", yesNo(job.healthy()));
    line("tensors in flight", std::to_string(job.tensors_in_flight()));
    line("operations done", std::to_string(job.operations_done()));
    line("bytes done", bytesWithUnits(job.bytes_done()));
    line("fused responses", std::to_string(job.fused_responses()));
    const v1::JobTuning& tuning = job.tuning();
    const bool leaders = tuning.autotune() && tuning.samples_planned() == 0;  // a follower of an autotuned job
    line("fusion", leaders ? fusionOf(tuning.fusion_threshold_bytes()) + " (the leader's)"
                           : fusionOf(tuning.fusion_threshold_bytes()) + ", cycle " +
                                 printfString("%g", tuning.cycle_time_ms()) + " ms");
    line("autotune", tuning.autotune() ? autotuneOf(tuning) : "off");
    line("errors", std::to_string(job.errors()));
    line("last error", job.last_error().empty() ? "-" : job.last_error());
    line("stall warnings", std::to_string(job.stall_warnings()));
    std::string sets;
    for (const auto& set : job.process_sets()) {
      std::string ranks;
      for (int r : set.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      sets += (sets.empty() ? "" : " ") + std::to_string(set.id()) + ":[" + ranks + "]";
    }
    line("process sets", sets.empty() ? "-" : sets);
    if (job.elastic()) {
      line("elastic", "epoch " + std::to_string(job.epoch()) + ", size " + std::to_string(job.size()) + ", min size " +
                          std::to_string(job.min_size()) + ", resets " + std::to_string(job.history_size()) +
                          ", commits " + std::to_string(job.commits()));
    }
    out += "  ranks (" + std::to_string(job.ranks_size()) + "):\n";
    out += formatRankTable(job);
    if (tuning.trials_size() > 0) {
      out += "  autotune trials (median of each setting's samples):\n";
      std::vector<std::vector<std::string>> rows{{"FUSION", "CYCLE", "MB/S"}};
      for (const auto& trial : tuning.trials()) {
        rows.push_back({trial.fusion_threshold_bytes() <= 1 ? "none" : formatBytes(trial.fusion_threshold_bytes()),
                        printfString("%g ms", trial.cycle_time_ms()),
                        printfString("%.1f", trial.bytes_per_second() / 1e6)});
      }
      out += formatTable(rows, "    ");
    }
  }
  return out;
}

namespace {
std::string gbps(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}
}  // namespace

std::string formatMembers(const v1::ListJobsResponse& jobs) {
  std::string out;
  for (const auto& job : jobs.jobs()) {
    if (job.nodes_size() == 0 && job.size() == job.local_size()) continue;
    out += "job " + job.job_id() + "  epoch " + std::to_string(job.epoch()) + (job.nodes_size() ? "" : "  (forming)") +
           (job.nccl_id_digest().empty() ? "" : "  nccl id " + job.nccl_id_digest()) + "\n";
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"NODE", "ROLE", "ADDRESS", "HOST", "TOPOLOGY", "RANKS", "GPUS", "HEARTBEAT AGE", "SENT", "RECEIVED",
                    "GB/S", "FAILED"});
    for (const auto& node : job.nodes()) {
      std::string ranks;
      for (int r : node.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      const int64_t age = node.heartbeat_age_ms();
      rows.push_back(
          {std::to_string(node.cross_rank()) + (node.self() ? " (self)" : ""), node.leader() ? "leader" : "follower",
           node.peer_address(), node.hostname(), node.topology().empty() ? "-" : node.topology(), ranks,
           std::to_string(node.gpus()), age < 0 ? "-" : std::to_string(age) + " ms", formatBytes(node.bytes_sent()),
           formatBytes(node.bytes_received()), gbps(node.throughput_gbps()), std::to_string(node.failed_transfers())});
    }
    out += formatTable(rows, "  ");
  }
  return out.empty() ? "no multi-node jobs\n" : out;
}

std::string formatHistory(const v1::ListJobsResponse& jobs) {
  std::string out;
  for (const auto& job : jobs.jobs()) {
    if (!job.elastic()) continue;
    out += "job " + job.job_id() + "  epoch " + std::to_string(job.epoch()) + "  min size " +
           std::to_string(job.min_size()) + (job.ended() ? "  (ended)" : "") + "\n";
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"EPOCH", "WHEN (UTC)", "SIZE", "FAILED", "RECOVERY", "CAUSE"});
    for (const auto& change : job.history()) {
      const std::time_t seconds = static_cast<std::time_t>(change.unix_ms() / 1000);
      std::tm utc{};
      gmtime_r(&seconds, &utc);
      char when[32];
      std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &utc);
      rows.push_back({std::to_string(change.epoch()), when,
                      std::to_string(change.size_before()) + " -> " + std::to_string(change.size_after()),
                      std::to_string(change.failed_collectives()),
                      change.recovery_ms() > 0 ? std::to_string(change.recovery_ms()) + " ms" : "-", change.cause()});
    }
    out += rows.size() > 1 ? formatTable(rows, "  ") : "  no membership change yet\n";
  }
  return out.empty() ? "no elastic jobs\n" : out;
}

namespace {

std::string rankList(const google::protobuf::RepeatedField<int32_t>& ranks) {
  std::string out;
  for (int rank : ranks) out += (out.empty() ? "" : ",") + std::to_string(rank);
  return out;
}

// One tensor of `gradsyncctl tensors`: its name, age and two rank lists.
std::string tensorLine(const std::string& name, double age_seconds, const char* first_label,
                       const google::protobuf::RepeatedField<int32_t>& first, const char* second_label,
                       const google::protobuf::RepeatedField<int32_t>& second) {
  // The rank lists may be long: outside printfString's fixed buffer.
  return printfString("  %-40s %9s", name.c_str(), formatDuration(age_seconds).c_str()) + "  " + first_label + " [" +
         rankList(first) + "]  " + second_label + " [" + rankList(second) + "]\n";
}

}  // namespace

std::string formatTensors(const v1::ListTensorsResponse& tensors) {
  if (tensors.jobs_size() == 0) return "no jobs\n";
  std::string out;
  for (const auto& job : tensors.jobs()) {
    out += "job " + job.job_id() + ": " + std::to_string(job.in_flight()) + " in flight, " +
           std::to_string(job.negotiating_size()) + " waiting for ranks";
    if (job.awaiting_output_size() > 0) {
      out += ", " + std::to_string(job.awaiting_output_size()) + " waiting for output grants";
    }
    out += "\n";
    for (const auto& tensor : job.negotiating()) {
      out += tensorLine(tensor.name(), tensor.age_seconds(), "submitted", tensor.submitted_ranks(), "missing",
                        tensor.missing_ranks());
    }
    for (const auto& tensor : job.awaiting_output()) {
      out += tensorLine(tensor.name(), tensor.age_seconds(), "output granted", tensor.granted_ranks(),
                        "output requested from", tensor.waiting_ranks());
    }
  }
  return out;
}

StatusOr<std::string> formatJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return internalError("cannot print " + message.GetTypeName() + " as JSON: " + status.ToString());
  }
  return json + "\n";
}

}  // namespace gradsync::ctl
