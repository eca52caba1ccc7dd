// SPDX-License-Identifier: Apache-2.0
// validateEnqueue on any Enqueue a client can send (session stream or ring),
// as a local rank with an arena, as a remote rank, and as a CUDA tensor on a
// daemon without GPUs. The first byte picks the case; the rest is the
// serialized message.
#include "daemon/coordinator/request_wire.h"
#include "daemon/server/enqueue_validation.h"
#include "tests/fuzz/fuzz_arena.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  v1::Enqueue enqueue;
  if (!enqueue.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  server::EnqueueContext context;
  context.rank = mode & 3;
  context.job_size = 1 + ((mode >> 2) & 7);
  context.process_sets =
      std::make_shared<coordinator::ProcessSetTable>(context.job_size, std::vector<std::vector<int>>{{0}});
  context.max_name_length = 64;
  context.remote = (mode & 0x40) != 0;
  context.arena = context.remote ? nullptr : &fuzz::fuzzArena();
  context.gpus_present = (mode & 0x80) != 0;
  context.no_gpu_reason = "no GPU here";
  auto request = server::validateEnqueue(enqueue, context);
  if (request.isOk()) {
    // What a follower forwards must survive the round trip unchanged.
    const v1::Enqueue again = coordinator::enqueueOf(*request);
    (void)coordinator::requestOf(context.rank, again);
  }
  return 0;
}
