// SPDX-License-Identifier: Apache-2.0
#include "daemon/exe/options.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "daemon/common/logging.h"

namespace gradsync::exe {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty())
      first = "line " + std::to_string(line + 1) + " column " + std::to_string(column + 1) + ": " + message;
  }
  std::string first;
};

StatusOr<uint64_t> parseUnsigned(const std::string& flag, const std::string& value, int base = 10) {
  if (value.empty()) return invalidArgument(flag + " needs a value");
  size_t used = 0;
  unsigned long long parsed = 0;
  bool ok = value[0] != '-';
  if (ok) {
    errno = 0;
    char* end = nullptr;
    parsed = std::strtoull(value.c_str(), &end, base);
    used = static_cast<size_t>(end - value.c_str());
    ok = errno == 0 && used == value.size();
  }
  if (!ok) return invalidArgument(flag + ": '" + value + "' is not a non-negative integer");
  return static_cast<uint64_t>(parsed);
}

using Setter = std::function<Status(v1::DaemonConfig*, const std::string&)>;

template <typename Field>
Setter number(const char* flag, void (v1::DaemonConfig::*set)(Field), int base = 10) {
  return [flag, set, base](v1::DaemonConfig* c, const std::string& v) -> Status {
    ASSIGN_OR_RETURN(uint64_t n, parseUnsigned(flag, v, base));
    if (n > static_cast<uint64_t>(std::numeric_limits<Field>::max()))
      return invalidArgument(std::string(flag) + " too large");
    (c->*set)(static_cast<Field>(n));
    return okStatus();
  };
}

Setter boolean(const char* flag, void (v1::DaemonConfig::*set)(bool)) {
  return [flag, set](v1::DaemonConfig* c, const std::string& v) -> Status {
    if (v == "true" || v == "1" || v == "on") {
      (c->*set)(true);
    } else if (v == "false" || v == "0" || v == "off") {
      (c->*set)(false);
    } else {
      return invalidArgument(std::string(flag) + ": '" + v + "' is not true or false");
    }
    return okStatus();
  };
}

Setter text(void (v1::DaemonConfig::*set)(const std::string&)) {
  return [set](v1::DaemonConfig* c, const std::string& v) {
    (c->*set)(v);
    return okStatus();
  };
}

Setter tlsPath(void (v1::PeerTls::*set)(const std::string&)) {
  return [set](v1::DaemonConfig* c, const std::string& v) {
    (c->mutable_peer_tls()->*set)(v);
    return okStatus();
  };
}

const std::map<std::string, Setter>& setters() {
  using C = v1::DaemonConfig;
  static const auto* table = new std::map<std::string, Setter>{
      {"--socket-path", text(&C::set_socket_path)},
      {"--handoff-socket-path", text(&C::set_handoff_socket_path)},
      {"--socket-mode", number<uint32_t>("--socket-mode", &C::set_socket_mode, 8)},
      {"--socket-group", text(&C::set_socket_group)},
      {"--log-level", text(&C::set_log_level)},
      {"--cycle-time-ms", number<uint32_t>("--cycle-time-ms", &C::set_cycle_time_ms)},
      {"--fusion-threshold-bytes", number<uint64_t>("--fusion-threshold-bytes", &C::set_fusion_threshold_bytes)},
      {"--stall-warning-seconds", number<uint32_t>("--stall-warning-seconds", &C::set_stall_warning_seconds)},
      {"--stall-deadline-seconds", number<uint32_t>("--stall-deadline-seconds", &C::set_stall_deadline_seconds)},
      {"--exit-with-pid", number<uint32_t>("--exit-with-pid", &C::set_exit_with_pid)},
      {"--reduce-threads", number<uint32_t>("--reduce-threads", &C::set_reduce_threads)},
      {"--max-arena-bytes", number<uint64_t>("--max-arena-bytes", &C::set_max_arena_bytes)},
      {"--max-jobs", number<uint32_t>("--max-jobs", &C::set_max_jobs)},
      {"--max-local-ranks", number<uint32_t>("--max-local-ranks", &C::set_max_local_ranks)},
      {"--max-inflight-per-rank", number<uint32_t>("--max-inflight-per-rank", &C::set_max_inflight_per_rank)},
      {"--max-total-arena-bytes", number<uint64_t>("--max-total-arena-bytes", &C::set_max_total_arena_bytes)},
      {"--max-job-size", number<uint32_t>("--max-job-size", &C::set_max_job_size)},
      {"--max-ipc-mappings-per-rank",
       number<uint32_t>("--max-ipc-mappings-per-rank", &C::set_max_ipc_mappings_per_rank)},
      {"--max-ipc-mappings", number<uint32_t>("--max-ipc-mappings", &C::set_max_ipc_mappings)},
      {"--timeline-dir", text(&C::set_timeline_dir)},
      {"--data-plane-devices", text(&C::set_data_plane_devices)},
      {"--data-plane-tcp-segment-bytes",
       number<uint64_t>("--data-plane-tcp-segment-bytes", &C::set_data_plane_tcp_segment_bytes)},
      {"--max-message-bytes", number<uint32_t>("--max-message-bytes", &C::set_max_message_bytes)},
      {"--peer-address", text(&C::set_peer_address)},
      {"--topology", text(&C::set_topology)},
      {"--membership-part-bytes", number<uint32_t>("--membership-part-bytes", &C::set_membership_part_bytes)},
      {"--join-timeout-seconds", number<uint32_t>("--join-timeout-seconds", &C::set_join_timeout_seconds)},
      {"--response-cache-capacity", number<uint32_t>("--response-cache-capacity", &C::set_response_cache_capacity)},
      {"--gpu-cross-node", text(&C::set_gpu_cross_node)},
      {"--virtual-gpus-per-gpu", number<uint32_t>("--virtual-gpus-per-gpu", &C::set_virtual_gpus_per_gpu)},
      {"--leader-failover", text(&C::set_leader_failover)},
      {"--steady-state", text(&C::set_steady_state)},
      {"--link-cost", text(&C::set_link_cost)},
      {"--metrics-address", text(&C::set_metrics_address)},
      {"--autotune", boolean("--autotune", &C::set_autotune)},
      {"--autotune-warmup-samples", number<uint32_t>("--autotune-warmup-samples", &C::set_autotune_warmup_samples)},
      {"--autotune-steps-per-sample",
       number<uint32_t>("--autotune-steps-per-sample", &C::set_autotune_steps_per_sample)},
      {"--autotune-samples-per-setting",
       number<uint32_t>("--autotune-samples-per-setting", &C::set_autotune_samples_per_setting)},
      {"--peer-tls-cert", tlsPath(&v1::PeerTls::set_cert_path)},
      {"--peer-tls-key", tlsPath(&v1::PeerTls::set_key_path)},
      {"--peer-tls-ca", tlsPath(&v1::PeerTls::set_ca_path)},
  };
  return *table;
}

Status checkRange(const char* name, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value < lo || value > hi) {
    return invalidArgument(std::string(name) + " = " + std::to_string(value) + " is outside [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "]");
  }
  return okStatus();
}

}  // namespace

StatusOr<v1::DaemonConfig> loadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return notFound("cannot read config file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseConfig(buffer.str(), "config file " + path);
}

StatusOr<v1::DaemonConfig> parseConfig(const std::string& content, const std::string& origin) {
  v1::DaemonConfig config;
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '{') {
    auto status = google::protobuf::util::JsonStringToMessage(content, &config);
    if (!status.ok()) return invalidArgument(origin + " (JSON): " + std::string(status.message()));
    return config;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(content, &config)) {
    return invalidArgument(origin + " (text format): " + errors.first);
  }
  return config;
}

namespace {

// Zero or empty settings take their defaults: where and how the daemon
// serves,
void applyServingDefaults(v1::DaemonConfig* c) {
  if (c->socket_path().empty()) c->set_socket_path("/run/gradsync/gradsyncd.sock");
  if (c->handoff_socket_path().empty()) c->set_handoff_socket_path(c->socket_path() + ".handoff");
  if (c->socket_mode() == 0) c->set_socket_mode(0660);
  if (c->log_level().empty()) c->set_log_level("info");
  if (c->timeline_dir().empty()) c->set_timeline_dir("/var/lib/gradsync/timelines");
  if (c->max_message_bytes() == 0) c->set_max_message_bytes(4 << 20);
  if (c->membership_part_bytes() == 0) c->set_membership_part_bytes(512 << 10);
  if (c->data_plane_tcp_segment_bytes() == 0) c->set_data_plane_tcp_segment_bytes(512 << 10);
}

// the bounds on what jobs and ranks may take,
void applyLimitDefaults(v1::DaemonConfig* c) {
  if (c->max_arena_bytes() == 0) c->set_max_arena_bytes(uint64_t{64} << 30);
  if (c->max_jobs() == 0) c->set_max_jobs(64);
  if (c->max_local_ranks() == 0) c->set_max_local_ranks(256);
  if (c->max_inflight_per_rank() == 0) c->set_max_inflight_per_rank(16384);
  if (c->max_total_arena_bytes() == 0) c->set_max_total_arena_bytes(uint64_t{1} << 40);
  if (c->max_job_size() == 0) c->set_max_job_size(65536);
  if (c->max_ipc_mappings_per_rank() == 0) c->set_max_ipc_mappings_per_rank(65536);
  if (c->max_ipc_mappings() == 0) c->set_max_ipc_mappings(262144);
  if (c->response_cache_capacity() == 0) c->set_response_cache_capacity(4096);
}

// and how collectives are scheduled, fused, timed out and tuned.
void applySchedulingDefaults(v1::DaemonConfig* c) {
  if (c->cycle_time_ms() == 0) c->set_cycle_time_ms(1);
  if (c->fusion_threshold_bytes() == 0) c->set_fusion_threshold_bytes(64 << 20);
  if (c->stall_warning_seconds() == 0) c->set_stall_warning_seconds(60);
  if (c->stall_deadline_seconds() == 0) c->set_stall_deadline_seconds(std::max(300u, c->stall_warning_seconds()));
  if (c->reduce_threads() == 0) c->set_reduce_threads(std::max(1u, std::thread::hardware_concurrency()));
  if (c->join_timeout_seconds() == 0) c->set_join_timeout_seconds(30);
  if (c->leader_failover().empty()) c->set_leader_failover("off");
  if (c->steady_state().empty()) c->set_steady_state("rounds");
  if (c->link_cost().empty()) c->set_link_cost("auto");
  if (c->autotune_warmup_samples() == 0) c->set_autotune_warmup_samples(3);
  if (c->autotune_steps_per_sample() == 0) c->set_autotune_steps_per_sample(10);
  if (c->autotune_samples_per_setting() == 0) c->set_autotune_samples_per_setting(5);
  if (c->gpu_cross_node().empty()) c->set_gpu_cross_node("auto");
}

// A setting that must be one of `choices`.
Status checkChoice(const std::string& name, const std::string& value, const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return okStatus();
  std::string list;
  for (const auto& choice : choices) list += (list.empty() ? "" : ", ") + choice;
  return invalidArgument(name + " '" + value + "' is not one of " + list);
}

Status validateSockets(const v1::DaemonConfig& c) {
  if (c.socket_path().size() >= 108 || c.handoff_socket_path().size() >= 108) {
    return invalidArgument("socket paths must be shorter than 108 bytes (Unix socket limit)");
  }
  if (c.socket_path() == c.handoff_socket_path()) {
    return invalidArgument("socket_path and handoff_socket_path must differ");
  }
  if (c.socket_mode() & ~0770u) {
    return invalidArgument("socket_mode " + std::to_string(c.socket_mode()) +
                           " grants access to others: only owner and group bits (0770) may be set");
  }
  return okStatus();
}

Status validateRanges(const v1::DaemonConfig& c) {
  RETURN_IF_ERROR(checkRange("cycle_time_ms", c.cycle_time_ms(), 1, 1000));
  RETURN_IF_ERROR(checkRange("fusion_threshold_bytes", c.fusion_threshold_bytes(), 1, uint64_t{16} << 30));
  RETURN_IF_ERROR(checkRange("reduce_threads", c.reduce_threads(), 1, 256));
  RETURN_IF_ERROR(checkRange("max_jobs", c.max_jobs(), 1, 100000));
  RETURN_IF_ERROR(checkRange("max_local_ranks", c.max_local_ranks(), 1, 65536));
  RETURN_IF_ERROR(checkRange("max_inflight_per_rank", c.max_inflight_per_rank(), 1, 1 << 20));
  RETURN_IF_ERROR(checkRange("max_message_bytes", c.max_message_bytes(), 4096, 1 << 30));
  RETURN_IF_ERROR(checkRange("membership_part_bytes", c.membership_part_bytes(), 1, c.max_message_bytes() / 4));
  RETURN_IF_ERROR(checkRange("max_job_size", c.max_job_size(), 1, 1 << 20));
  RETURN_IF_ERROR(checkRange("max_ipc_mappings_per_rank", c.max_ipc_mappings_per_rank(), 1, 1 << 20));
  RETURN_IF_ERROR(checkRange("max_ipc_mappings", c.max_ipc_mappings(), 1, 1 << 24));
  RETURN_IF_ERROR(checkRange("autotune_warmup_samples", c.autotune_warmup_samples(), 1, 1000));
  RETURN_IF_ERROR(checkRange("autotune_steps_per_sample", c.autotune_steps_per_sample(), 1, 10000));
  RETURN_IF_ERROR(checkRange("autotune_samples_per_setting", c.autotune_samples_per_setting(), 1, 100));
  RETURN_IF_ERROR(checkRange("virtual_gpus_per_gpu", c.virtual_gpus_per_gpu(), 0, 8));
  RETURN_IF_ERROR(checkRange("data_plane_tcp_segment_bytes", c.data_plane_tcp_segment_bytes(), 8 << 10, 16 << 20));
  if (c.stall_deadline_seconds() < c.stall_warning_seconds()) {
    return invalidArgument("stall_deadline_seconds (" + std::to_string(c.stall_deadline_seconds()) +
                           ") must be at least stall_warning_seconds (" + std::to_string(c.stall_warning_seconds()) +
                           ")");
  }
  return okStatus();
}

// The metrics address, the peers' TLS files and the log level.
Status validateEndpointsAndLogs(const v1::DaemonConfig& c) {
  if (!c.metrics_address().empty() && c.metrics_address().find(':') == std::string::npos) {
    return invalidArgument("metrics_address '" + c.metrics_address() + "' is not host:port");
  }
  if (c.has_peer_tls()) {
    const auto& tls = c.peer_tls();
    const int set = !tls.cert_path().empty() + !tls.key_path().empty() + !tls.ca_path().empty();
    if (set != 3) return invalidArgument("peer_tls needs cert_path, key_path and ca_path together");
    if (c.peer_address().empty()) return invalidArgument("peer_tls is set but peer_address is not");
  }
  constexpr size_t kMaxTopology = 256;
  const std::string& topology = c.topology();
  if (topology.size() > kMaxTopology ||
      topology.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:") !=
          std::string::npos) {
    return invalidArgument("topology '" + topology.substr(0, kMaxTopology) +
                           "' must be at most 256 letters, digits and . _ - / :");
  }
  const std::string& level = c.log_level();
  if (level != "off" && spdlog::level::from_str(level) == spdlog::level::off) {
    return invalidArgument("log_level '" + level + "' is not one of trace, debug, info, warn, error, critical, off");
  }
  return okStatus();
}

}  // namespace

Status applyDefaultsAndValidate(v1::DaemonConfig* c) {
  applyServingDefaults(c);
  applyLimitDefaults(c);
  applySchedulingDefaults(c);
  RETURN_IF_ERROR(checkChoice("steady_state", c->steady_state(), {"rounds", "leader-rounds", "leader"}));
  RETURN_IF_ERROR(checkChoice("link_cost", c->link_cost(), {"auto", "measured", "fixed"}));
  RETURN_IF_ERROR(checkChoice("leader_failover", c->leader_failover(), {"off", "quorum"}));
  RETURN_IF_ERROR(checkChoice("gpu_cross_node", c->gpu_cross_node(), {"auto", "staging"}));
  RETURN_IF_ERROR(validateEndpointsAndLogs(*c));
  RETURN_IF_ERROR(validateSockets(*c));
  return validateRanges(*c);
}

StatusOr<Options> parseOptions(const std::vector<std::string>& args) {
  Options options;
  std::vector<std::pair<std::string, std::string>> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      options.show_help = true;
      continue;
    }
    if (arg == "--version") {
      options.show_version = true;
      continue;
    }
    if (arg == "--check-config") {
      options.check_config = true;
      continue;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return invalidArgument("flag " + arg + " needs a value");
    }
    if (arg == "--config-path") {
      options.config_path = value;
    } else if (setters().count(arg)) {
      flags.emplace_back(arg, value);
    } else {
      return invalidArgument("unknown flag " + arg + " (see --help)");
    }
  }
  if (!options.config_path.empty()) {
    ASSIGN_OR_RETURN(options.config, loadConfigFile(options.config_path));
  }
  for (const auto& [flag, value] : flags) RETURN_IF_ERROR(setters().at(flag)(&options.config, value));
  RETURN_IF_ERROR(applyDefaultsAndValidate(&options.config));
  return options;
}

std::string usage() {
  std::string u =
      "usage: gradsyncd [--config-path FILE] [--check-config] [--version] [flags]\n"
      "  FILE: gradsync.v1.DaemonConfig in protobuf text format, or JSON (starts with '{').\n"
      "  Flags override the file; each sets the config field of the same name:\n";
  for (const auto& [flag, setter] : setters()) u += "    " + flag + " VALUE\n";
  u += "  --socket-mode takes octal (e.g. 660).\n";
  return u;
}

}  // namespace gradsync::exe
