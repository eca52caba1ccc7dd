// SPDX-License-Identifier: Apache-2.0
// Register, as any local process may call it: identity, sizes, process sets,
// leader address and token checked by the registry; an accepted rank's
// session is dropped again so every input starts from the same registry
// (which keeps the jobs of earlier inputs: mismatches against them are
// exercised too, up to its job limit).
#include "daemon/executor/reduce_pool.h"
#include "daemon/server/job_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  static executor::ReducePool pool(1);
  static server::JobRegistry* registry = [] {
    server::RegistryLimits limits;
    limits.max_jobs = 8;
    limits.max_local_ranks = 16;
    return new server::JobRegistry(limits, &pool);  // lives as long as the process
  }();
  v1::RegisterRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto session = registry->registerRank(request);
  if (session.isOk()) registry->sessionLost((*session)->id(), "fuzz input done");
  return 0;
}
