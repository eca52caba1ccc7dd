// SPDX-License-Identifier: Apache-2.0
// Client: starting, waiting for and releasing operations.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/dtype.h"
#include "base/fast_copy.h"
#include "client/src/client.h"

namespace gradsync::client {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 50;

bool copiesBack(v1::CollectiveType type) { return type == v1::ALLREDUCE || type == v1::BROADCAST; }

StatusOr<uint64_t> bytesOf(const OpSpec& spec) {
  if (isDataless(spec.type)) return uint64_t{0};
  const size_t esize = elementSize(spec.dtype);
  if (esize == 0) return invalidArgument("unknown dtype " + std::to_string(static_cast<int>(spec.dtype)));
  if (spec.shape.size() > 16) return invalidArgument("more than 16 dimensions");
  const int64_t count = elementCount(spec.shape, kMaxElements);
  if (count < 0) return invalidArgument("invalid shape " + shapeString(spec.shape));
  if (count > 0 && spec.data == nullptr) return invalidArgument("tensor '" + spec.name + "' has no data");
  return static_cast<uint64_t>(count) * esize;
}

// A group's id is a hash of its members' names (in name order), so every
// rank derives the same id whatever order it submits its groups in, and the
// daemon matches a group by its names, as Horovod does. Never 0 (no group).
uint64_t groupIdOf(const std::vector<OpSpec>& specs) {
  std::vector<const std::string*> names;
  for (const auto& spec : specs) names.push_back(&spec.name);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits, over (length, bytes) of each name
  const auto mix = [&](unsigned char c) { hash = (hash ^ c) * 1099511628211ull; };
  for (const std::string* name : names) {
    for (int shift = 0; shift < 64; shift += 8) mix(static_cast<unsigned char>(name->size() >> shift));
    for (unsigned char c : *name) mix(c);
  }
  return hash == 0 ? 1 : hash;
}

}  // namespace

StatusOr<uint64_t> Client::enqueue(const OpSpec& spec) { return enqueueOne(spec, 0, 0); }

StatusOr<std::vector<uint64_t>> Client::enqueueGroup(const std::vector<OpSpec>& specs) {
  const uint64_t group = groupIdOf(specs);
  std::vector<uint64_t> handles;
  for (const auto& spec : specs) {
    if (spec.type != v1::ALLREDUCE) return invalidArgument("grouped operations must be allreduces");
    auto handle = enqueueOne(spec, group, static_cast<uint32_t>(specs.size()));
    if (!handle.isOk()) {
      // The daemon holds the members sent so far until the group is whole: it
      // never will be, so they end by the stall deadline. Say so.
      return Status(handle.status().code(), handle.status().message() + " (grouped operation left incomplete)");
    }
    handles.push_back(*handle);
  }
  return handles;
}

StatusOr<uint64_t> Client::abandon(const OpSpec& spec, const std::string& reason) {
  if (reason.empty()) return invalidArgument("abandoning '" + spec.name + "' needs a reason");
  OpSpec bare;
  bare.type = spec.type;
  bare.name = spec.name;
  bare.process_set = spec.process_set;
  bare.abandoned = reason.substr(0, 1024);
  bare.target_set = spec.target_set;
  bare.call = spec.call;
  return enqueueOne(bare, 0, 0);
}

StatusOr<uint64_t> Client::enqueueOne(const OpSpec& spec, uint64_t group_id, uint32_t group_size) {
  // An abandoned collective carries no data (and no CUDA state).
  ASSIGN_OR_RETURN(uint64_t bytes, spec.abandoned.empty() ? bytesOf(spec) : StatusOr<uint64_t>(uint64_t{0}));
  auto op = std::make_unique<Operation>();
  op->type = spec.type;
  op->length = bytes;
  if (Status placed = placeInput(spec, op.get()); !placed.isOk()) {
    discard(*op);
    return placed;
  }
  v1::ClientMessage message;
  v1::Enqueue* e = message.mutable_enqueue();
  describeEnqueue(spec, *op, group_id, group_size, e);
  Status admitted = okStatus();
  {
    MutexLock lock(mutex_);
    if (!broken_.isOk() || shut_down_) {
      admitted = broken_.isOk() ? failedPrecondition("client is shut down") : broken_;
    } else {
      op->handle = next_handle_++;
      op->name = spec.name;
      if (spec.type == v1::BARRIER && op->name.empty()) op->name = "barrier." + std::to_string(next_barrier_++);
      if (spec.type == v1::JOIN) op->name = "join";
      e->set_handle(op->handle);
      e->set_name(op->name);
      e->set_epoch(membership_.epoch);
      ops_[op->handle] = std::move(op);
    }
  }
  if (!admitted.isOk()) {
    discard(*op);  // never seen by the daemon or the reader
    return admitted;
  }
  submit(message);
  return e->handle();
}

Status Client::placeInput(const OpSpec& spec, Operation* op) {
  const bool has_output = spec.type == v1::ALLGATHER || spec.type == v1::ALLTOALL || spec.type == v1::REDUCESCATTER;
  if (spec.cuda && has_output) {
    ASSIGN_OR_RETURN(op->cuda_output_ref, cuda().prepareOutput(spec.name, spec.output, spec.output_bytes, spec.stream));
    op->cuda_output = spec.output;
    op->output_length = spec.output_bytes;
  }
  if (spec.cuda && !isDataless(spec.type)) {
    if (cuda().slotsExhausted()) RETURN_IF_ERROR(waitForCudaSlot(spec.name));
    // A tensor without elements still travels as CUDA (the ranks agree on
    // the device); it takes events only when this rank gets an output.
    ASSIGN_OR_RETURN(
        op->cuda, op->length > 0 ? cuda().prepare(spec.name, spec.data, op->length, spec.stream, copiesBack(spec.type))
                                 : cuda().prepareEmpty(spec.name, spec.stream, has_output && spec.output_bytes > 0));
  } else if (op->length > 0 && arena_->contains(spec.data, op->length, &op->input_offset)) {
    // Zero copy: the tensor already lives in the arena.
  } else if (op->length > 0) {
    ASSIGN_OR_RETURN(op->input_offset, arena_->allocate(op->length));
    op->owns_input = true;
    fastCopy(arena_->base() + op->input_offset, spec.data, op->length);
    if (copiesBack(spec.type)) op->copy_back_to = spec.data;
  }
  return okStatus();
}

void Client::discard(Operation& op) {
  if (op.owns_input) (void)arena_->release(op.input_offset);
  if (op.cuda) (void)cuda_->complete(*op.cuda, false);
  if (op.cuda_output_ref) (void)cuda_->releaseOutput(*op.cuda_output_ref, false);
}

void Client::describeEnqueue(const OpSpec& spec, const Operation& op, uint64_t group_id, uint32_t group_size,
                             v1::Enqueue* e) {
  e->set_type(spec.type);
  e->set_dtype(spec.dtype);
  for (int64_t d : spec.shape) e->add_shape(d);
  e->set_op(spec.op);
  e->set_prescale(spec.prescale);
  e->set_postscale(spec.postscale);
  e->set_root_rank(spec.root_rank);
  e->set_process_set_id(spec.process_set);
  for (int64_t s : spec.splits) e->add_splits(s);
  e->set_offset(op.input_offset);
  e->set_length(op.length);
  e->set_group_id(group_id);
  e->set_group_size(group_size);
  if (!spec.abandoned.empty()) e->set_abandoned(spec.abandoned);
  for (int rank : spec.set_ranks) e->add_process_set_ranks(rank);
  e->set_commit(spec.commit);
  e->set_call(spec.call);
  e->set_target_process_set(spec.target_set);
  if (op.cuda) *e->mutable_cuda() = op.cuda->ref;
  if (op.cuda_output_ref) {
    *e->mutable_cuda_output() = op.cuda_output_ref->ref;
    e->set_output_length(spec.output_bytes);
  }
}

void Client::submit(const v1::ClientMessage& message) {
  bool sent = false;
  {
    MutexLock lock(write_mutex_);
    if (submit_ring_ && stream_) sent = submit_ring_->push(message.enqueue().SerializeAsString());
  }
  if (sent || send(message)) return;
  MutexLock lock(mutex_);
  auto found = ops_.find(message.enqueue().handle());
  if (found != ops_.end() && !found->second->done) {
    found->second->status = unavailable("cannot send to gradsyncd: session stream closed");
    found->second->done = true;
    cv_.notify_all();
  }
}

void Client::finish(Operation& op) {
  // Runs with mutex_ released: copies can be large.
  if (op.cuda) {
    // The result is ordered before whatever the caller queues next: this
    // thread waits for the daemon's done event, or the caller's stream does.
    Status waited = options_.cuda_stream_completion
                        ? cuda_->complete(*op.cuda, op.status.isOk())
                        : cuda_->completeOnHost(
                              *op.cuda, op.name, [this] { return brokenStatus(); }, kCudaDoneLimit);
    if (!waited.isOk() && op.status.isOk()) op.status = waited;
    op.cuda.reset();
  }
  if (op.cuda_output_ref) {
    Status copied = cuda_->releaseOutput(*op.cuda_output_ref, op.status.isOk());
    if (!copied.isOk() && op.status.isOk()) op.status = copied;
    op.cuda_output_ref.reset();
  }
  if (op.copy_back_to != nullptr && op.status.isOk()) {
    fastCopy(op.copy_back_to, arena_->base() + op.input_offset, op.length);
  }
  if (op.owns_input) (void)arena_->release(op.input_offset);
  op.owns_input = false;
}

Status Client::brokenStatus() {
  MutexLock lock(mutex_);
  return broken_;
}

Status Client::waitForCudaSlot(const std::string& name) {
  const auto deadline = std::chrono::steady_clock::now() + kCudaDoneLimit;
  MutexLock lock(mutex_);
  for (;;) {
    drainCompletionsLocked();
    // Lock order mutex_, then the CUDA session's: as everywhere else.
    bool freed = false;
    for (auto& [handle, op] : ops_) {
      if (!op->done || op->finishing || !op->cuda) continue;
      Status waited = cuda_->complete(*op->cuda, op->status.isOk());
      if (!waited.isOk() && op->status.isOk()) op->status = waited;
      op->cuda.reset();
      freed = true;
    }
    if (freed || !cuda_->slotsExhausted()) return okStatus();
    if (!broken_.isOk()) return broken_;
    if (std::chrono::steady_clock::now() > deadline) {
      return resourceExhausted("CUDA tensor '" + name + "': every event slot is held by an operation in flight, " +
                               "and none finished within " + std::to_string(kCudaDoneLimit.count() / 1000) + " s");
    }
    if (ring_reader_) {  // another thread sleeps on the ring: it wakes this one
      cv_.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      continue;
    }
    ring_reader_ = true;
    lock.unlock();
    complete_ring_->wait(std::chrono::milliseconds(100));
    lock.lock();
    ring_reader_ = false;
    cv_.notify_all();  // one of the others may take the ring over
  }
}

StatusOr<bool> Client::poll(uint64_t handle) {
  MutexLock lock(mutex_);
  drainCompletionsLocked();
  auto it = ops_.find(handle);
  if (it == ops_.end()) return notFound("unknown handle " + std::to_string(handle));
  if (!it->second->done) return false;
  lock.unlock();
  (void)wait(handle, 0);  // completes the copy back
  return true;
}

Status Client::wait(uint64_t handle, double timeout_seconds) {
  MutexLock lock(mutex_);
  auto it = ops_.find(handle);
  if (it == ops_.end()) return notFound("unknown handle " + std::to_string(handle));
  Operation& op = *it->second;
  // Completions arrive in the arena's ring (read here, by the waiting
  // thread: no hand-off between threads) or, rarely, over the stream (the
  // reader thread then wakes this futex too).
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(timeout_seconds));
  std::optional<std::chrono::microseconds> spin;  // set once this call waits
  for (;;) {
    drainCompletionsLocked();
    if (op.done) break;
    if (!spin) spin = completion_spin_.next();
    auto slice = std::chrono::milliseconds(100);
    if (timeout_seconds > 0) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds(0)) {
        return deadlineExceeded("operation '" + op.name + "' not done within " + std::to_string(timeout_seconds) +
                                " s");
      }
      slice =
          std::min(slice, std::chrono::duration_cast<std::chrono::milliseconds>(left) + std::chrono::milliseconds(1));
    }
    if (ring_reader_) {  // another thread sleeps on the ring: it wakes this one
      cv_.wait_until(lock, std::chrono::steady_clock::now() + slice);
      continue;
    }
    ring_reader_ = true;
    lock.unlock();
    complete_ring_->wait(slice, *spin);
    lock.lock();
    ring_reader_ = false;
    cv_.notify_all();  // one of the others may take the ring over
  }
  if (spin) completion_spin_.record(*spin, std::chrono::steady_clock::now() - start);
  if (!op.finishing) {
    op.finishing = true;
    lock.unlock();
    finish(op);
    lock.lock();
    op.finished = true;
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return op.finished; });
  return op.status;
}

StatusOr<OpResult> Client::result(uint64_t handle) {
  MutexLock lock(mutex_);
  auto it = ops_.find(handle);
  if (it == ops_.end()) return notFound("unknown handle " + std::to_string(handle));
  const Operation& op = *it->second;
  if (!op.finished) return failedPrecondition("operation '" + op.name + "' has not been waited for");
  if (!op.status.isOk()) return op.status;
  OpResult result;
  if (op.has_output) {
    result.data = arena_->base() + op.output_offset;
    result.bytes = op.output_length;
  } else if (op.cuda_output != nullptr) {
    result.data = op.cuda_output;
    result.bytes = op.output_length;
  }
  result.shape = op.output_shape;
  result.received_splits = op.received_splits;
  result.last_joined_rank = op.last_joined_rank;
  result.process_set_id = op.process_set_id;
  return result;
}

const int64_t* Client::receivedSplits(uint64_t handle) {
  MutexLock lock(mutex_);
  auto it = ops_.find(handle);
  if (it == ops_.end() || it->second->received_splits.empty()) return nullptr;
  return it->second->received_splits.data();
}

Status Client::release(uint64_t handle) {
  std::unique_ptr<Operation> op;
  {
    MutexLock lock(mutex_);
    auto it = ops_.find(handle);
    if (it == ops_.end()) return notFound("unknown handle " + std::to_string(handle));
    if (!it->second->done) return failedPrecondition("operation '" + it->second->name + "' is still in flight");
    if (it->second->finishing && !it->second->finished) return failedPrecondition("operation is being waited for");
    op = std::move(it->second);
    ops_.erase(it);
  }
  if (op->owns_input) (void)arena_->release(op->input_offset);
  if (op->has_output) (void)arena_->release(op->output_offset);
  if (op->cuda) (void)cuda_->complete(*op->cuda, op->status.isOk());  // never waited for: free its slot
  if (op->cuda_output_ref) (void)cuda_->releaseOutput(*op->cuda_output_ref, op->status.isOk());
  return okStatus();
}

void Client::shutdown() {
  if (shut_down_.exchange(true)) return;
  if (stream_) {
    {
      MutexLock lock(write_mutex_);
      stream_->WritesDone();
    }
    MutexLock lock(mutex_);
    if (!cv_.wait_for(lock, std::chrono::seconds(5), [&]() GS_REQUIRES(mutex_) { return reader_done_; }))
      stream_context_.TryCancel();
  }
  if (reader_.joinable()) reader_.join();
  handoff_fd_.reset();
}

}  // namespace gradsync::client
