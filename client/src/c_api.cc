// SPDX-License-Identifier: Apache-2.0
// The C ABI boundary: no exception and no Status crosses it. Every entry
// point catches everything and turns it into a code plus the thread's last
// error text.
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>

#include "base/dtype.h"
#include "client/include/gradsync/gradsync.h"
#include "client/src/client.h"
#include "client/src/env.h"

struct gradsync_client {
  std::unique_ptr<gradsync::client::Client> impl;
};

namespace {

using gradsync::Status;
using gradsync::StatusCode;
using gradsync::client::Client;
using gradsync::client::ClientOptions;
using gradsync::client::OpSpec;

thread_local std::string last_error;

gradsync_status_t report(const Status& status) {
  last_error = status.isOk() ? std::string() : status.message();
  return static_cast<gradsync_status_t>(status.code());
}

gradsync_status_t invalid(const std::string& message) { return report(gradsync::invalidArgument(message)); }

// Runs `fn` (returning a Status) and converts anything thrown into INTERNAL.
template <typename Fn>
gradsync_status_t guarded(Fn&& fn) {
  try {
    return report(fn());
  } catch (const std::exception& e) {
    return report(gradsync::internalError(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return report(gradsync::internalError("unexpected exception"));
  }
}

// The CPUs this process may run on.
int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// The settings only the environment gives (elastic, autotune, polling).
void applyEnvOnly(const gradsync::client::EnvIdentity& env, ClientOptions* o) {
  o->leader_address = env.leader.value_or("");
  o->elastic = env.elastic || env.elastic_join;
  o->min_size = env.min_size.value_or(0);
  o->elastic_join = env.elastic_join;
  o->join_marker = env.join_marker.value_or("");
  o->elastic_timeout_seconds = env.elastic_timeout.value_or(600);
  o->cuda_stream_completion = env.cuda_stream_completion;
  if (env.autotune) o->autotune = *env.autotune ? gradsync::v1::AUTOTUNE_ON : gradsync::v1::AUTOTUNE_OFF;
  o->autotune_warmup_samples = env.autotune_warmup_samples.value_or(0);
  o->autotune_steps_per_sample = env.autotune_steps_per_sample.value_or(0);
  o->autotune_samples_per_setting = env.autotune_samples_per_setting.value_or(0);
  o->autotune_log_path = env.autotune_log.value_or("");
  // Polling needs a second CPU: on one, the daemon could not run meanwhile.
  if (usableCpus() < 2) o->completion_spin = std::chrono::microseconds(0);
  if (env.spin_us) o->completion_spin = std::chrono::microseconds(std::min<int64_t>(*env.spin_us, 10000));
}

// The config's process sets (arrays the caller owns), checked.
gradsync::StatusOr<std::vector<std::vector<int>>> processSetsFrom(const gradsync_config_t* c) {
  if (c->num_process_sets < 0 || (c->num_process_sets > 0 && (!c->process_set_sizes || !c->process_set_ranks))) {
    return gradsync::invalidArgument("process sets: sizes and ranks arrays required");
  }
  std::vector<std::vector<int>> sets;
  for (int32_t i = 0; i < c->num_process_sets; ++i) {
    if (c->process_set_sizes[i] < 0 || (c->process_set_sizes[i] > 0 && !c->process_set_ranks[i])) {
      return gradsync::invalidArgument("process set " + std::to_string(i + 1) + " is malformed");
    }
    sets.emplace_back(c->process_set_ranks[i], c->process_set_ranks[i] + c->process_set_sizes[i]);
  }
  return sets;
}

gradsync::StatusOr<ClientOptions> optionsFrom(const gradsync_config_t* c) {
  // Structs from callers built against the 0.2 header end before `leader_address`.
  if (c->struct_size < offsetof(gradsync_config_t, leader_address) || c->version != GRADSYNC_CONFIG_VERSION) {
    return gradsync::invalidArgument("gradsync_config_t not initialised with gradsync_config_init (size/version)");
  }
  const auto env = gradsync::client::readEnvIdentity();
  ClientOptions o;
  o.socket_path = c->socket_path ? c->socket_path : env.socket_path.value_or("/run/gradsync/gradsyncd.sock");
  o.job_id = c->job_id ? c->job_id : env.job_id.value_or("");
  o.token = c->token ? c->token : env.token.value_or("");
  o.rank = c->rank >= 0 ? c->rank : env.rank.value_or(-1);
  o.size = c->world_size > 0 ? c->world_size : env.size.value_or(-1);
  o.local_rank = c->local_rank >= 0 ? c->local_rank : env.local_rank.value_or(o.rank);
  o.local_size = c->local_size > 0 ? c->local_size : env.local_size.value_or(o.size);
  o.arena_bytes = c->arena_bytes ? c->arena_bytes : env.arena_bytes.value_or(uint64_t{4} << 30);
  o.connect_timeout_seconds = c->connect_timeout_seconds > 0 ? c->connect_timeout_seconds : 30;
  applyEnvOnly(env, &o);
  if (c->struct_size >= sizeof(gradsync_config_t) && c->leader_address != nullptr) {
    o.leader_address = c->leader_address;
  }
  if (o.job_id.empty()) return gradsync::invalidArgument("no job id: set GRADSYNC_JOB_ID or config.job_id");
  if (o.token.empty()) return gradsync::invalidArgument("no job token: set GRADSYNC_TOKEN or config.token");
  if (o.rank < 0 || o.size <= 0) return gradsync::invalidArgument("no rank/size: set GRADSYNC_RANK and GRADSYNC_SIZE");
  ASSIGN_OR_RETURN(o.process_sets, processSetsFrom(c));
  return o;
}

gradsync::StatusOr<OpSpec> specFrom(const gradsync_op_t* op) {
  // Structs from callers built against the 0.1 header end before `device`.
  if (op == nullptr || op->struct_size < offsetof(gradsync_op_t, device)) {
    return gradsync::invalidArgument("gradsync_op_t not initialised with gradsync_op_init");
  }
  if (op->ndim < 0 || op->ndim > GRADSYNC_MAX_DIMS || (op->ndim > 0 && op->shape == nullptr)) {
    return gradsync::invalidArgument("ndim must be in [0, 16] with a shape array");
  }
  if (op->num_splits < 0 || (op->num_splits > 0 && op->splits == nullptr)) {
    return gradsync::invalidArgument("splits array missing");
  }
  OpSpec spec;
  spec.type = static_cast<gradsync::v1::CollectiveType>(op->collective);
  if (gradsync::changesProcessSets(spec.type)) {
    return gradsync::invalidArgument("process sets change through gradsync_add_process_set / _remove_process_set");
  }
  spec.name = op->name ? op->name : "";
  spec.dtype = static_cast<gradsync::v1::DataType>(op->dtype);
  spec.shape.assign(op->shape, op->shape + op->ndim);
  spec.data = op->data;
  spec.op = static_cast<gradsync::v1::ReduceOp>(op->reduce_op);
  spec.prescale = op->prescale;
  spec.postscale = op->postscale;
  spec.root_rank = op->root_rank;
  spec.process_set = op->process_set;
  if (op->num_splits > 0) spec.splits.assign(op->splits, op->splits + op->num_splits);
  if (op->struct_size >= offsetof(gradsync_op_t, call)) {  // the 0.2 fields
    if (op->device != GRADSYNC_DEVICE_CPU && op->device != GRADSYNC_DEVICE_CUDA) {
      return gradsync::invalidArgument("unknown device " + std::to_string(op->device));
    }
    spec.cuda = op->device == GRADSYNC_DEVICE_CUDA;
    spec.stream = op->stream;
    spec.output = op->output;
    spec.output_bytes = op->output_bytes;
    if (spec.output == nullptr && spec.output_bytes > 0) {
      return gradsync::invalidArgument("output_bytes without an output buffer");
    }
  }
  if (op->struct_size >= sizeof(gradsync_op_t)) spec.call = op->call;
  return spec;
}

}  // namespace

extern "C" {

const char* gradsync_version(void) { return "0.1.0"; }
const char* gradsync_last_error(void) { return last_error.c_str(); }

gradsync_status_t gradsync_config_init(gradsync_config_t* config) {
  if (config == nullptr) return invalid("config is NULL");
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->version = GRADSYNC_CONFIG_VERSION;
  config->rank = config->world_size = config->local_rank = config->local_size = -1;
  return report(gradsync::okStatus());
}

gradsync_status_t gradsync_op_init_sized(gradsync_op_t* op, uint32_t struct_size) {
  if (op == nullptr) return invalid("op is NULL");
  if (struct_size < offsetof(gradsync_op_t, device)) return invalid("gradsync_op_t smaller than its 0.1 layout");
  const size_t size = std::min<size_t>(struct_size, sizeof(*op));
  std::memset(op, 0, size);
  op->struct_size = static_cast<uint32_t>(size);
  op->collective = GRADSYNC_ALLREDUCE;
  op->dtype = GRADSYNC_FLOAT32;
  op->reduce_op = GRADSYNC_SUM;
  return report(gradsync::okStatus());
}

// The 0.1 ABI's initialiser (no size argument), for binaries built against
// that header: it knew only the fields before `device`.
#undef gradsync_op_init
extern "C" gradsync_status_t gradsync_op_init(gradsync_op_t* op) {
  return gradsync_op_init_sized(op, static_cast<uint32_t>(offsetof(gradsync_op_t, device)));
}

gradsync_status_t gradsync_init(const gradsync_config_t* config, gradsync_client_t** client) {
  if (config == nullptr || client == nullptr) return invalid("config and client must not be NULL");
  return guarded([&]() -> Status {
    ASSIGN_OR_RETURN(auto options, optionsFrom(config));
    ASSIGN_OR_RETURN(auto impl, Client::connect(options));
    *client = new gradsync_client{std::move(impl)};
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_shutdown(gradsync_client_t* client) {
  if (client == nullptr) return invalid("client is NULL");
  return guarded([&]() -> Status {
    client->impl->shutdown();
    delete client;
    return gradsync::okStatus();
  });
}

int32_t gradsync_rank(const gradsync_client_t* c) { return c ? c->impl->membership().rank : -1; }
int32_t gradsync_size(const gradsync_client_t* c) { return c ? c->impl->membership().size : -1; }
int32_t gradsync_local_rank(const gradsync_client_t* c) { return c ? c->impl->membership().local_rank : -1; }
int32_t gradsync_local_size(const gradsync_client_t* c) { return c ? c->impl->membership().local_size : -1; }
uint64_t gradsync_epoch(const gradsync_client_t* c) { return c ? c->impl->membership().epoch : 0; }

void* gradsync_alloc(gradsync_client_t* client, uint64_t bytes) {
  if (client == nullptr) {
    invalid("client is NULL");
    return nullptr;
  }
  void* out = nullptr;
  guarded([&]() -> Status {
    ASSIGN_OR_RETURN(uint64_t offset, client->impl->arena().allocate(bytes));
    out = client->impl->arena().base() + offset;
    return gradsync::okStatus();
  });
  return out;
}

uint64_t gradsync_arena_bytes(const gradsync_client_t* c) { return c ? c->impl->arena().size() : 0; }

gradsync_status_t gradsync_free(gradsync_client_t* client, void* ptr) {
  if (client == nullptr) return invalid("client is NULL");
  if (ptr == nullptr) return report(gradsync::okStatus());
  return guarded([&]() -> Status {
    uint64_t offset = 0;
    if (!client->impl->arena().contains(ptr, 0, &offset)) return gradsync::invalidArgument("pointer not in the arena");
    return client->impl->arena().release(offset);
  });
}

gradsync_status_t gradsync_enqueue(gradsync_client_t* client, const gradsync_op_t* op, gradsync_handle_t* handle) {
  if (client == nullptr || handle == nullptr) return invalid("client and handle must not be NULL");
  return guarded([&]() -> Status {
    ASSIGN_OR_RETURN(auto spec, specFrom(op));
    ASSIGN_OR_RETURN(*handle, client->impl->enqueue(spec));
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_enqueue_group(gradsync_client_t* client, const gradsync_op_t* ops, int32_t n,
                                         gradsync_handle_t* handles) {
  if (client == nullptr || ops == nullptr || handles == nullptr || n <= 0) return invalid("bad group arguments");
  return guarded([&]() -> Status {
    std::vector<OpSpec> specs;
    for (int32_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(auto spec, specFrom(&ops[i]));
      specs.push_back(std::move(spec));
    }
    ASSIGN_OR_RETURN(auto ids, client->impl->enqueueGroup(specs));
    std::copy(ids.begin(), ids.end(), handles);
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_abandon(gradsync_client_t* client, const gradsync_op_t* op, const char* reason,
                                   gradsync_handle_t* handle) {
  if (client == nullptr || op == nullptr || reason == nullptr || handle == nullptr) {
    return invalid("client, op, reason and handle must not be NULL");
  }
  if (op->struct_size < offsetof(gradsync_op_t, device)) {
    return invalid("gradsync_op_t not initialised with gradsync_op_init");
  }
  return guarded([&]() -> Status {
    OpSpec spec;
    spec.type = static_cast<gradsync::v1::CollectiveType>(op->collective);
    spec.name = op->name ? op->name : "";
    spec.process_set = op->process_set;
    if (op->struct_size >= sizeof(gradsync_op_t)) spec.call = op->call;
    ASSIGN_OR_RETURN(*handle, client->impl->abandon(spec, reason));
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_add_process_set(gradsync_client_t* client, const int32_t* ranks, int32_t num_ranks,
                                           double timeout_seconds, int32_t* process_set_id) {
  if (client == nullptr || process_set_id == nullptr || num_ranks < 0 || (num_ranks > 0 && ranks == nullptr)) {
    return invalid("client, process_set_id and (for num_ranks > 0) ranks must not be NULL; num_ranks >= 0");
  }
  return guarded([&]() -> Status {
    ASSIGN_OR_RETURN(*process_set_id,
                     client->impl->addProcessSet(std::vector<int>(ranks, ranks + num_ranks), timeout_seconds));
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_remove_process_set(gradsync_client_t* client, int32_t process_set_id,
                                              double timeout_seconds) {
  if (client == nullptr) return invalid("client is NULL");
  return guarded([&] { return client->impl->removeProcessSet(process_set_id, timeout_seconds); });
}

gradsync_status_t gradsync_process_set_ranks(gradsync_client_t* client, int32_t process_set_id, int32_t* ranks,
                                             int32_t capacity, int32_t* num_ranks) {
  if (client == nullptr || num_ranks == nullptr || capacity < 0 || (capacity > 0 && ranks == nullptr)) {
    return invalid("client, num_ranks and (for capacity > 0) ranks must not be NULL; capacity >= 0");
  }
  return guarded([&]() -> Status {
    ASSIGN_OR_RETURN(auto members, client->impl->processSetRanks(process_set_id));
    *num_ranks = static_cast<int32_t>(members.size());
    std::copy_n(members.begin(), std::min<size_t>(members.size(), static_cast<size_t>(capacity)), ranks);
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_start_timeline(gradsync_client_t* client, const char* path, int32_t mark_cycles) {
  if (client == nullptr || path == nullptr) return invalid("client and path must not be NULL");
  return guarded([&]() -> Status { return client->impl->startTimeline(path, mark_cycles != 0); });
}

gradsync_status_t gradsync_stop_timeline(gradsync_client_t* client) {
  if (client == nullptr) return invalid("client must not be NULL");
  return guarded([&]() -> Status { return client->impl->stopTimeline(); });
}

gradsync_status_t gradsync_poll(gradsync_client_t* client, gradsync_handle_t handle, int32_t* done) {
  if (client == nullptr || done == nullptr) return invalid("client and done must not be NULL");
  return guarded([&]() -> Status {
    ASSIGN_OR_RETURN(bool finished, client->impl->poll(handle));
    *done = finished ? 1 : 0;
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_wait(gradsync_client_t* client, gradsync_handle_t handle, double timeout_seconds) {
  if (client == nullptr) return invalid("client is NULL");
  const gradsync_status_t code = guarded([&] { return client->impl->wait(handle, timeout_seconds); });
  if (code != GRADSYNC_OK && code != GRADSYNC_DEADLINE_EXCEEDED && client->impl->membershipChanged(handle)) {
    return GRADSYNC_MEMBERSHIP_CHANGED;  // last_error keeps the daemon's message
  }
  return code;
}

gradsync_status_t gradsync_commit_barrier(gradsync_client_t* client, double timeout_seconds, int32_t* epoch_changed) {
  if (client == nullptr || epoch_changed == nullptr) return invalid("client and epoch_changed must not be NULL");
  bool retriable = false;
  const gradsync_status_t code = guarded([&]() -> Status {
    ASSIGN_OR_RETURN(bool changed, client->impl->commitBarrier(timeout_seconds, &retriable));
    *epoch_changed = changed ? 1 : 0;
    return gradsync::okStatus();
  });
  return code != GRADSYNC_OK && retriable ? GRADSYNC_MEMBERSHIP_CHANGED : code;
}

gradsync_status_t gradsync_rejoin(gradsync_client_t* client, double timeout_seconds) {
  if (client == nullptr) return invalid("client is NULL");
  return guarded([&]() -> Status { return client->impl->rejoin(timeout_seconds).status(); });
}

gradsync_status_t gradsync_result(gradsync_client_t* client, gradsync_handle_t handle, gradsync_result_t* result) {
  if (client == nullptr || result == nullptr || result->struct_size < sizeof(gradsync_result_t)) {
    return invalid("client and an initialised result (struct_size) are required");
  }
  return guarded([&]() -> Status {
    ASSIGN_OR_RETURN(auto r, client->impl->result(handle));
    // The result stays valid until release: keep the splits in the op.
    result->data = r.data;
    result->bytes = r.bytes;
    result->ndim = static_cast<int32_t>(std::min<size_t>(r.shape.size(), GRADSYNC_MAX_DIMS));
    for (int32_t i = 0; i < result->ndim; ++i) result->shape[i] = r.shape[i];
    result->num_received_splits = static_cast<int32_t>(r.received_splits.size());
    result->received_splits = client->impl->receivedSplits(handle);
    result->last_joined_rank = r.last_joined_rank;
    return gradsync::okStatus();
  });
}

gradsync_status_t gradsync_release(gradsync_client_t* client, gradsync_handle_t handle) {
  if (client == nullptr) return invalid("client is NULL");
  return guarded([&] { return client->impl->release(handle); });
}

gradsync_status_t gradsync_release_cuda_exports(gradsync_client_t* client) {
  if (client == nullptr) return invalid("client is NULL");
  return guarded([&] { return client->impl->releaseCudaExports(); });
}

}  // extern "C"
