// SPDX-License-Identifier: Apache-2.0
#include "client/src/env.h"

#include <cstdlib>

namespace gradsync::client {
namespace {

std::optional<std::string> text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

template <typename T>
std::optional<T> number(const char* name) {
  auto value = text(name);
  if (!value) return std::nullopt;
  char* end = nullptr;
  long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (end == value->c_str() || *end != '\0' || parsed < 0) return std::nullopt;
  return static_cast<T>(parsed);
}

// GRADSYNC_<name>, or Horovod's HOROVOD_<name>.
std::optional<std::string> textOrHorovod(const std::string& name) {
  auto value = text(("GRADSYNC_" + name).c_str());
  return value ? value : text(("HOROVOD_" + name).c_str());
}

template <typename T>
std::optional<T> numberOrHorovod(const std::string& name) {
  auto value = number<T>(("GRADSYNC_" + name).c_str());
  return value ? value : number<T>(("HOROVOD_" + name).c_str());
}

}  // namespace

EnvIdentity readEnvIdentity() {
  EnvIdentity env;
  env.socket_path = text("GRADSYNC_SOCKET");
  env.job_id = text("GRADSYNC_JOB_ID");
  env.token = text("GRADSYNC_TOKEN");
  env.rank = number<int>("GRADSYNC_RANK");
  env.size = number<int>("GRADSYNC_SIZE");
  env.local_rank = number<int>("GRADSYNC_LOCAL_RANK");
  env.local_size = number<int>("GRADSYNC_LOCAL_SIZE");
  env.arena_bytes = number<uint64_t>("GRADSYNC_ARENA_BYTES");
  env.leader = text("GRADSYNC_LEADER");
  auto elastic = text("GRADSYNC_ELASTIC");
  if (!elastic) elastic = text("HOROVOD_ELASTIC");
  env.elastic = elastic && !elastic->empty() && *elastic != "0";
  env.min_size = number<int>("GRADSYNC_MIN_SIZE");
  auto join = text("GRADSYNC_ELASTIC_JOIN");
  env.elastic_join = join && !join->empty() && *join != "0";
  env.join_marker = text("GRADSYNC_JOIN_MARKER");
  auto timeout = text("GRADSYNC_ELASTIC_TIMEOUT");
  if (!timeout) timeout = text("HOROVOD_ELASTIC_TIMEOUT");
  if (timeout) {
    char* end = nullptr;
    const double seconds = std::strtod(timeout->c_str(), &end);
    if (end != timeout->c_str() && *end == '\0' && seconds > 0) env.elastic_timeout = seconds;
  }
  auto completion = text("GRADSYNC_CUDA_COMPLETION");
  env.cuda_stream_completion = completion && *completion == "stream";
  env.spin_us = number<int64_t>("GRADSYNC_SPIN_US");
  if (auto autotune = textOrHorovod("AUTOTUNE")) env.autotune = *autotune != "0";
  env.autotune_warmup_samples = numberOrHorovod<uint32_t>("AUTOTUNE_WARMUP_SAMPLES");
  env.autotune_steps_per_sample = numberOrHorovod<uint32_t>("AUTOTUNE_STEPS_PER_SAMPLE");
  env.autotune_samples_per_setting = number<uint32_t>("GRADSYNC_AUTOTUNE_SAMPLES_PER_SETTING");
  env.autotune_log = textOrHorovod("AUTOTUNE_LOG");
  env.timeline = textOrHorovod("TIMELINE");
  const auto marks = textOrHorovod("TIMELINE_MARK_CYCLES");
  env.timeline_mark_cycles = marks && *marks != "0";
  return env;
}

}  // namespace gradsync::client
