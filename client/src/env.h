// SPDX-License-Identifier: Apache-2.0
// The client's identity from GRADSYNC_* environment variables: the only
// place the client library reads the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gradsync::client {

struct EnvIdentity {
  std::optional<std::string> socket_path;  // GRADSYNC_SOCKET
  std::optional<std::string> job_id;       // GRADSYNC_JOB_ID
  std::optional<std::string> token;        // GRADSYNC_TOKEN
  std::optional<int> rank;                 // GRADSYNC_RANK
  std::optional<int> size;                 // GRADSYNC_SIZE
  std::optional<int> local_rank;           // GRADSYNC_LOCAL_RANK
  std::optional<int> local_size;           // GRADSYNC_LOCAL_SIZE
  std::optional<uint64_t> arena_bytes;     // GRADSYNC_ARENA_BYTES
  std::optional<std::string> leader;       // GRADSYNC_LEADER
  // GRADSYNC_ELASTIC (or Horovod's HOROVOD_ELASTIC) non-empty and not "0":
  // an elastic job, which goes on at GRADSYNC_MIN_SIZE ranks or more
  // (default: its size) when ranks are lost.
  bool elastic = false;
  std::optional<int> min_size;  // GRADSYNC_MIN_SIZE
  // GRADSYNC_ELASTIC_JOIN=1: a new rank joining a running elastic job
  // (gradsyncrun sets it when it starts a replacement).
  bool elastic_join = false;
  // GRADSYNC_JOIN_MARKER: a file a joiner creates once admitted (gradsyncrun
  // replaces only ranks that were).
  std::optional<std::string> join_marker;
  // GRADSYNC_ELASTIC_TIMEOUT (or HOROVOD_ELASTIC_TIMEOUT): seconds a joiner
  // waits to be admitted.
  std::optional<double> elastic_timeout;
  // GRADSYNC_CUDA_COMPLETION=stream: a CUDA operation completes by making
  // the caller's stream wait for the daemon's done event (no host wait, as
  // Horovod's HOROVOD_ENABLE_ASYNC_COMPLETION); default "host": wait() polls
  // that event on the host.
  bool cuda_stream_completion = false;
  // GRADSYNC_SPIN_US: microseconds a waiting call polls for its completion
  // before it sleeps (0: sleep at once).
  std::optional<int64_t> spin_us;
  // GRADSYNC_AUTOTUNE (or HOROVOD_AUTOTUNE): "0" off, anything else on;
  // unset: the daemon's config decides. The sample sizes
  // GRADSYNC_AUTOTUNE_WARMUP_SAMPLES, _STEPS_PER_SAMPLE (or Horovod's
  // names) and _SAMPLES_PER_SETTING.
  std::optional<bool> autotune;
  std::optional<uint32_t> autotune_warmup_samples;
  std::optional<uint32_t> autotune_steps_per_sample;
  std::optional<uint32_t> autotune_samples_per_setting;
  // GRADSYNC_AUTOTUNE_LOG (or HOROVOD_AUTOTUNE_LOG): rank 0 writes autotune's
  // measurements there (CSV).
  std::optional<std::string> autotune_log;
  // GRADSYNC_TIMELINE (or HOROVOD_TIMELINE): rank 0 writes the job's
  // timeline there; GRADSYNC_TIMELINE_MARK_CYCLES (or Horovod's) set and not
  // "0": with the daemon's cycle marks.
  std::optional<std::string> timeline;
  bool timeline_mark_cycles = false;
};

EnvIdentity readEnvIdentity();

}  // namespace gradsync::client
