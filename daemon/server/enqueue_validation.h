// SPDX-License-Identifier: Apache-2.0
// Turns one rank's Enqueue message into a coordinator Request, checking
// everything that can be checked without the other ranks: enums, shape and
// length, the arena range, splits, root, name.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/coordinator/process_set_table.h"
#include "daemon/coordinator/request.h"
#include "daemon/gpu/client_gpu.h"
#include "handoff/shm_arena.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

struct EnqueueContext {
  int rank = 0;
  int job_size = 0;
  // The job's process sets (never null in use; 0 is the whole job).
  std::shared_ptr<const coordinator::ProcessSetTable> process_sets;
  uint32_t max_name_length = 256;
  const handoff::ShmArena* arena = nullptr;
  // A request forwarded from another node: its range was checked there.
  bool remote = false;
  // CUDA tensors: the rank's GPU state (null before it attached), whether
  // this daemon has GPUs at all, and if not, why (the error's text).
  const gpu::ClientGpu* gpu = nullptr;
  bool gpus_present = false;
  std::string no_gpu_reason;
};

// INVALID_ARGUMENT (bad values), OUT_OF_RANGE (range outside the arena or
// the CUDA allocation), FAILED_PRECONDITION (a CUDA tensor where there is no
// GPU, or before the rank attached its GPU),
// with the tensor name and the offending value in the message.
StatusOr<coordinator::Request> validateEnqueue(const v1::Enqueue& enqueue, const EnqueueContext& context);

}  // namespace gradsync::server
