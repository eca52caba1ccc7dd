// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/enqueue_validation.h"

#include <cmath>

#include "base/dtype.h"
#include "daemon/coordinator/request_wire.h"

namespace gradsync::server {
namespace {

using coordinator::Request;

// Largest element count accepted: keeps count * element size far from
// overflowing 64 bits.
constexpr int64_t kMaxElements = int64_t{1} << 50;

Status checkName(const v1::Enqueue& e, const EnqueueContext& c) {
  if (e.name().empty() && e.type() != v1::BARRIER && e.type() != v1::JOIN) {
    return invalidArgument("collective without a name");
  }
  if (e.name().size() > c.max_name_length) {
    return invalidArgument("collective name of " + std::to_string(e.name().size()) + " bytes (limit " +
                           std::to_string(c.max_name_length) + ")");
  }
  return okStatus();
}

Status checkReduction(const std::string& prefix, const v1::Enqueue& e) {
  if (!reduceOpAllowed(e.dtype(), e.op())) {
    return invalidArgument(prefix + "reduce op " + reduceOpName(e.op()) + " is not allowed on " +
                           dataTypeName(e.dtype()));
  }
  if (!std::isfinite(e.prescale()) || !std::isfinite(e.postscale())) {
    return invalidArgument(prefix + "scale factors must be finite");
  }
  return okStatus();
}

Status checkSplits(const std::string& prefix, Request& r, int set_size) {
  const int64_t dim0 = r.shape.empty() ? 1 : r.shape[0];
  if (r.splits.empty()) {
    if (dim0 % set_size != 0) {
      return invalidArgument(prefix + "alltoall without splits needs dim 0 (" + std::to_string(dim0) +
                             ") divisible by the process set size " + std::to_string(set_size));
    }
    r.splits.assign(set_size, dim0 / set_size);
    return okStatus();
  }
  if (static_cast<int>(r.splits.size()) != set_size) {
    return invalidArgument(prefix + std::to_string(r.splits.size()) + " alltoall splits for a process set of " +
                           std::to_string(set_size) + " ranks");
  }
  int64_t sum = 0;
  for (int64_t s : r.splits) {
    if (s < 0 || s > dim0) return invalidArgument(prefix + "alltoall split " + std::to_string(s) + " out of range");
    sum += s;
  }
  if (sum != dim0) {
    return invalidArgument(prefix + "alltoall splits sum to " + std::to_string(sum) + " but dim 0 is " +
                           std::to_string(dim0));
  }
  return okStatus();
}

Status checkTypeRules(const std::string& prefix, const v1::Enqueue& e, Request& r, const EnqueueContext& c) {
  switch (e.type()) {
    case v1::ALLREDUCE:
      return checkReduction(prefix, e);
    case v1::REDUCESCATTER:
      if (r.shape.empty()) return invalidArgument(prefix + "reducescatter needs at least one dimension");
      if (e.op() == v1::ADASUM) return invalidArgument(prefix + "Adasum is an allreduce only");
      return checkReduction(prefix, e);
    case v1::ALLGATHER:
      if (r.shape.empty()) return invalidArgument(prefix + "allgather needs at least one dimension");
      return okStatus();
    case v1::BROADCAST:
      if (e.root_rank() < 0 || e.root_rank() >= c.job_size) {
        return invalidArgument(prefix + "broadcast root rank " + std::to_string(e.root_rank()) + " outside [0, " +
                               std::to_string(c.job_size) + ")");
      }
      return okStatus();
    case v1::ALLTOALL:
      if (r.shape.empty()) return invalidArgument(prefix + "alltoall needs at least one dimension");
      return checkSplits(prefix, r, static_cast<int>(c.process_sets->find(r.process_set_id)->size()));
    case v1::BARRIER:
    case v1::JOIN:
      return okStatus();
    case v1::PROCESS_SET_ADD: {
      Status ranks = c.process_sets->checkRanks(r.set_ranks);
      return ranks.isOk() ? ranks : invalidArgument(prefix + ranks.message());
    }
    case v1::PROCESS_SET_REMOVE:
      if (r.target_set == 0) return invalidArgument(prefix + "the global process set (id 0) cannot be removed");
      return okStatus();
    default:
      return invalidArgument(prefix + "unknown collective type " + std::to_string(static_cast<int>(e.type())));
  }
}

// A CUDA tensor's output buffer: present exactly for the collectives that
// take one, and inside the rank's mappings.
Status checkCudaOutput(const std::string& prefix, const v1::Enqueue& e, const gpu::ClientGpu& gpu);

// An empty input and no (or an empty) output.
bool touchesNoMemory(const v1::Enqueue& e) {
  const bool no_output = !e.has_cuda_output() || (e.cuda_output().buffer_id() == gpu::kNoBuffer &&
                                                  e.cuda_output().offset() == 0 && e.output_length() == 0);
  return e.cuda().buffer_id() == gpu::kNoBuffer && e.cuda().offset() == 0 && e.length() == 0 && no_output;
}

Status checkCuda(const std::string& prefix, const v1::Enqueue& e, const EnqueueContext& c) {
  if (!c.gpus_present) return failedPrecondition(prefix + "is a CUDA tensor, but " + c.no_gpu_reason);
  // "No events" only for an operation that touches nothing of this rank's.
  const bool empty = touchesNoMemory(e);
  if (e.cuda().event_slot() == gpu::kNoEventSlot && !empty) {
    return invalidArgument(prefix + "a CUDA tensor with memory needs an event slot");
  }
  if (empty && e.cuda().event_slot() == gpu::kNoEventSlot) {
    if (e.has_cuda_output() && e.type() != v1::ALLGATHER && e.type() != v1::ALLTOALL && e.type() != v1::REDUCESCATTER) {
      return invalidArgument(prefix + "only allgather, alltoall and reducescatter take an output buffer");
    }
    return okStatus();  // no memory, no events: nothing to attach for
  }
  if (c.gpu == nullptr) {
    return failedPrecondition(prefix + "is a CUDA tensor, but the rank has not attached its GPU (hand-off CudaAttach)");
  }
  RETURN_IF_ERROR(c.gpu->checkSlot(e.cuda().event_slot()));
  // The kernels load whole elements: a misaligned one would fault the GPU.
  const uint64_t esize = elementSize(e.dtype());
  if (e.cuda().offset() % esize != 0 || (e.has_cuda_output() && e.cuda_output().offset() % esize != 0)) {
    return invalidArgument(prefix + "CUDA offset not aligned to its " + std::to_string(esize) + "-byte elements");
  }
  RETURN_IF_ERROR(c.gpu->check(e.cuda().buffer_id(), e.cuda().offset(), e.length()));
  return checkCudaOutput(prefix, e, *c.gpu);
}

Status checkCudaOutput(const std::string& prefix, const v1::Enqueue& e, const gpu::ClientGpu& gpu) {
  const bool has_output = e.type() == v1::ALLGATHER || e.type() == v1::ALLTOALL || e.type() == v1::REDUCESCATTER;
  if (has_output != e.has_cuda_output()) {
    return invalidArgument(prefix + (has_output ? "a CUDA " + collectiveName(e.type()) + " needs its output buffer"
                                                : "only allgather, alltoall and reducescatter take an output buffer"));
  }
  if (!has_output) return okStatus();
  return gpu.check(e.cuda_output().buffer_id(), e.cuda_output().offset(), e.output_length());
}

Status checkData(const std::string& prefix, const v1::Enqueue& e, Request& r, const EnqueueContext& c) {
  if (isDataless(e.type())) {
    r.shape.clear();
    r.offset = r.length = 0;
    return okStatus();
  }
  const size_t esize = elementSize(e.dtype());
  if (esize == 0) return invalidArgument(prefix + "unknown dtype " + std::to_string(static_cast<int>(e.dtype())));
  if (e.shape_size() > 16) return invalidArgument(prefix + "more than 16 dimensions");
  const int64_t count = elementCount(r.shape, kMaxElements);
  if (count < 0) return invalidArgument(prefix + "invalid shape " + shapeString(r.shape));
  if (e.length() != static_cast<uint64_t>(count) * esize) {
    return invalidArgument(prefix + "length " + std::to_string(e.length()) + " bytes does not match shape " +
                           shapeString(r.shape) + " of " + dataTypeName(e.dtype()) + " (" +
                           std::to_string(count * static_cast<int64_t>(esize)) + " bytes)");
  }
  if (e.has_cuda_output() && !e.has_cuda()) return invalidArgument(prefix + "a CUDA output for a CPU tensor");
  if (c.remote) return okStatus();
  if (e.has_cuda()) return checkCuda(prefix, e, c);
  if (c.arena == nullptr) return failedPrecondition(prefix + "no arena handed over yet");
  if (!c.arena->contains(e.offset(), e.length())) {
    return outOfRange(prefix + "range [" + std::to_string(e.offset()) + ", +" + std::to_string(e.length()) +
                      ") lies outside the rank's arena of " + std::to_string(c.arena->size()) + " bytes");
  }
  return okStatus();
}

}  // namespace

StatusOr<Request> validateEnqueue(const v1::Enqueue& e, const EnqueueContext& c) {
  RETURN_IF_ERROR(checkName(e, c));
  const std::string prefix = "tensor '" + e.name() + "' of rank " + std::to_string(c.rank) + ": ";
  Request r = coordinator::requestOf(c.rank, e);
  if (r.type == v1::BARRIER && r.name.empty()) r.name = "barrier";
  if (!c.process_sets->contains(r.process_set_id)) {
    return invalidArgument(prefix + "unknown process set " + std::to_string(r.process_set_id) +
                           " (never added, or removed)");
  }
  if (r.type != v1::PROCESS_SET_ADD && !r.set_ranks.empty()) {
    return invalidArgument(prefix + "only a process set add carries process set ranks");
  }
  if (changesProcessSets(r.type) && r.process_set_id != 0) {
    return invalidArgument(prefix + "process sets are added and removed by every rank of the job (process set 0)");
  }
  if ((r.group_id == 0) != (r.group_size == 0) || r.group_size > 65536) {
    return invalidArgument(prefix + "group id and group size must both be set (size <= 65536) or both be 0");
  }
  if (!r.abandoned.empty()) {
    // No data to check: the response fails on every rank.
    if (r.abandoned.size() > 1024) return invalidArgument(prefix + "abandon reason longer than 1024 bytes");
    if (r.type == v1::JOIN || r.type == v1::COLLECTIVE_TYPE_UNSPECIFIED || !v1::CollectiveType_IsValid(r.type)) {
      return invalidArgument(prefix + "only a collective can be abandoned");
    }
    r.offset = r.length = 0;
    r.cuda.reset();
    r.cuda_output.reset();
    return r;
  }
  RETURN_IF_ERROR(checkData(prefix, e, r, c));
  RETURN_IF_ERROR(checkTypeRules(prefix, e, r, c));
  return r;
}

}  // namespace gradsync::server
