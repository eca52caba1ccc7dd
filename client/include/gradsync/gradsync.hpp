// SPDX-License-Identifier: Apache-2.0
// Header-only C++ wrapper over the gradsync C ABI: RAII for the client and
// operation handles, errors as return values (no exceptions).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/gradsync.h"

namespace gradsync {

// Outcome of a call: code 0 is success; message() is the library's text.
struct Result {
  gradsync_status_t code = GRADSYNC_OK;
  std::string message;
  bool ok() const { return code == GRADSYNC_OK; }
  static Result fromCode(gradsync_status_t code) {
    return Result{code, code == GRADSYNC_OK ? std::string() : std::string(gradsync_last_error())};
  }
};

class Client;

// An operation in flight. Waits are explicit; the destructor releases the
// handle (waiting for completion first if needed, so buffers stay valid).
class Operation {
 public:
  Operation() = default;
  Operation(Operation&& other) noexcept : client_(std::exchange(other.client_, nullptr)), handle_(other.handle_) {}
  Operation& operator=(Operation&& other) noexcept {
    if (this != &other) {
      reset();
      client_ = std::exchange(other.client_, nullptr);
      handle_ = other.handle_;
    }
    return *this;
  }
  ~Operation() { reset(); }

  bool valid() const { return client_ != nullptr; }
  // timeout_seconds <= 0: until the daemon answers.
  Result wait(double timeout_seconds = 0) { return Result::fromCode(gradsync_wait(client_, handle_, timeout_seconds)); }
  bool done() const {
    int32_t d = 0;
    return gradsync_poll(client_, handle_, &d) == GRADSYNC_OK && d;
  }
  // Output of ALLGATHER / ALLTOALL / REDUCESCATTER (valid while this object lives).
  Result output(gradsync_result_t* result) const {
    result->struct_size = sizeof(*result);
    return Result::fromCode(gradsync_result(client_, handle_, result));
  }

 private:
  friend class Client;
  Operation(gradsync_client_t* client, gradsync_handle_t handle) : client_(client), handle_(handle) {}
  void reset() {
    if (client_ == nullptr) return;
    gradsync_wait(client_, handle_, 0);
    gradsync_release(client_, handle_);
    client_ = nullptr;
  }
  gradsync_client_t* client_ = nullptr;
  gradsync_handle_t handle_ = 0;
};

class Client {
 public:
  Client() = default;
  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    std::swap(client_, other.client_);
    return *this;
  }
  ~Client() {
    if (client_) gradsync_shutdown(client_);
  }

  // Identity from GRADSYNC_* environment variables, overridable in `config`.
  static Result connect(Client* out, const gradsync_config_t* config = nullptr) {
    gradsync_config_t defaults;
    if (config == nullptr) {
      gradsync_config_init(&defaults);
      config = &defaults;
    }
    gradsync_client_t* raw = nullptr;
    Result r = Result::fromCode(gradsync_init(config, &raw));
    if (r.ok()) *out = Client(raw);
    return r;
  }

  int rank() const { return gradsync_rank(client_); }
  int size() const { return gradsync_size(client_); }
  int localRank() const { return gradsync_local_rank(client_); }
  int localSize() const { return gradsync_local_size(client_); }

  // Memory in the shared arena: collectives on it run without copies.
  void* alloc(uint64_t bytes) { return gradsync_alloc(client_, bytes); }
  void free(void* ptr) { gradsync_free(client_, ptr); }

  Result start(const gradsync_op_t& op, Operation* out) {
    gradsync_handle_t handle = 0;
    Result r = Result::fromCode(gradsync_enqueue(client_, &op, &handle));
    if (r.ok()) *out = Operation(client_, handle);
    return r;
  }
  // This rank's data-less part in a collective it could not start (see
  // gradsync_abandon): the others fail at once with `reason`.
  Result abandon(const gradsync_op_t& op, const char* reason, Operation* out) {
    gradsync_handle_t handle = 0;
    Result r = Result::fromCode(gradsync_abandon(client_, &op, reason, &handle));
    if (r.ok()) *out = Operation(client_, handle);
    return r;
  }
  Result startGroup(const std::vector<gradsync_op_t>& ops, std::vector<Operation>* out) {
    std::vector<gradsync_handle_t> handles(ops.size());
    Result r = Result::fromCode(
        gradsync_enqueue_group(client_, ops.data(), static_cast<int32_t>(ops.size()), handles.data()));
    if (r.ok()) {
      for (auto h : handles) out->push_back(Operation(client_, h));
    }
    return r;
  }
  // Synchronous allreduce of a contiguous tensor, in place.
  Result allreduce(const char* name, void* data, int32_t dtype, std::vector<int64_t> shape,
                   int32_t reduce_op = GRADSYNC_SUM) {
    gradsync_op_t op;
    gradsync_op_init(&op);
    op.name = name;
    op.data = data;
    op.dtype = dtype;
    op.ndim = static_cast<int32_t>(shape.size());
    op.shape = shape.data();
    op.reduce_op = reduce_op;
    Operation handle;
    Result r = start(op, &handle);
    return r.ok() ? handle.wait() : r;
  }
  Result barrier() {
    gradsync_op_t op;
    gradsync_op_init(&op);
    op.collective = GRADSYNC_BARRIER;
    Operation handle;
    Result r = start(op, &handle);
    return r.ok() ? handle.wait() : r;
  }
  // Process sets at run time: collectives of every rank (see gradsync.h).
  Result addProcessSet(const std::vector<int32_t>& ranks, int32_t* process_set_id, double timeout_seconds = 0) {
    return Result::fromCode(gradsync_add_process_set(client_, ranks.data(), static_cast<int32_t>(ranks.size()),
                                                     timeout_seconds, process_set_id));
  }
  Result removeProcessSet(int32_t process_set_id, double timeout_seconds = 0) {
    return Result::fromCode(gradsync_remove_process_set(client_, process_set_id, timeout_seconds));
  }

  gradsync_client_t* raw() const { return client_; }

 private:
  explicit Client(gradsync_client_t* client) : client_(client) {}
  gradsync_client_t* client_ = nullptr;
};

}  // namespace gradsync
