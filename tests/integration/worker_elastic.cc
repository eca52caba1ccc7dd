// SPDX-License-Identifier: Apache-2.0
// Worker scenarios for elastic jobs spanning daemons (run with
// GRADSYNC_ELASTIC=1 and GRADSYNC_MIN_SIZE).
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

int64_t unixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// GRADSYNC_WORKER_LINGER_SECONDS: after a step that failed for good, the rank
// stays that long before it exits (as one that saves or restores its state
// would), so that the job sees no rank leave meanwhile.
void lingerAfterError(int rank, int step, const Result& r) {
  const char* linger = std::getenv("GRADSYNC_WORKER_LINGER_SECONDS");
  if (linger == nullptr) return;
  std::fprintf(stderr, "[rank %d] step %d failed at %lld: %s; staying %s s\n", rank, step,
               static_cast<long long>(unixMs()), r.message.c_str(), linger);
  std::this_thread::sleep_for(std::chrono::seconds(std::atoi(linger)));
}

// A retriable failure (the membership changed): rejoin and say so.
int rejoin(Client& c, int step, const std::string& why) {
  std::fprintf(stderr, "[rank %d] step %d: %s\n", c.rank(), step, why.c_str());
  WORKER_OK(Result::fromCode(gradsync_rejoin(c.raw(), 30)));
  g_rank = c.rank();
  return 0;
}

// elastic_loop STEPS SECONDS [commit [EPOCH]]: allreduces of 4 MiB in a
// loop (with `commit`, each followed by a commit barrier, which admits
// joiners). A retriable failure, or a commit that admitted joiners, is
// followed by a rejoin; every result must be the sum over the ranks of the
// current epoch. Prints "LOOPING" once the first step succeeded, and
// "RECOVERED epoch E at MS size N rank R" at the first success of each
// later epoch (MS: Unix milliseconds). A rank wants to stop once it has done
// STEPS steps in epoch EPOCH (default 2) or later and SECONDS have passed;
// the last element carries that wish, and all stop after the step where
// every rank wished it. Any other failure ends it with exit code 1.
// `data` (`count` floats) on the host, or (`cuda`) in the fake CUDA
// driver's device memory.
int loop(Client& c, const std::vector<std::string>& args, float* data, size_t count, bool cuda) {
  const int steps_after = args.size() > 0 ? std::atoi(args[0].c_str()) : 20;
  const double seconds = args.size() > 1 ? std::atof(args[1].c_str()) : 0;
  const bool commit = args.size() > 2 && args[2] == "commit";
  const uint64_t counted_epoch = args.size() > 3 ? std::strtoull(args[3].c_str(), nullptr, 10) : 2;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> shape = {static_cast<int64_t>(count)};
  auto allreduce = [&]() {
    gradsync_op_t op = makeOp(GRADSYNC_ALLREDUCE, "loop", data, GRADSYNC_FLOAT32, shape);
    if (cuda) op.device = GRADSYNC_DEVICE_CUDA;
    Operation handle;
    Result r = c.start(op, &handle);
    return r.ok() ? handle.wait() : r;
  };
  uint64_t recovered_epoch = 1;
  int done_after = 0;
  for (int step = 0; step < 100000; ++step) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool wish = done_after >= steps_after && elapsed >= seconds;
    std::fill(data, data + count, static_cast<float>(c.rank() + 1));
    data[count - 1] = wish ? 1.0f : 0.0f;
    Result r = allreduce();
    if (r.code == GRADSYNC_MEMBERSHIP_CHANGED) {
      if (rejoin(c, step, r.message)) return 1;
      continue;
    }
    if (!r.ok()) lingerAfterError(c.rank(), step, r);
    WORKER_CHECK(r.ok(), "step %d failed: %d %s", step, r.code, r.message.c_str());
    const float want = c.size() * (c.size() + 1) / 2.0f;
    WORKER_CHECK(data[0] == want && data[count - 2] == want, "step %d: sum %g, want %g at size %d", step, data[0], want,
                 c.size());
    const uint64_t epoch = gradsync_epoch(c.raw());
    if (step == 0) std::fprintf(stderr, "[rank %d] LOOPING\n", c.rank());
    if (epoch > recovered_epoch) {
      recovered_epoch = epoch;
      std::fprintf(stderr, "[rank %d] RECOVERED epoch %llu at %lld size %d rank %d\n", c.rank(),
                   static_cast<unsigned long long>(epoch), static_cast<long long>(unixMs()), c.size(), c.rank());
    }
    if (epoch >= counted_epoch) ++done_after;
    if (data[count - 1] == static_cast<float>(c.size())) return 0;  // every rank wished to stop
    if (!commit) continue;
    int32_t changed = 0;
    const Result committed = Result::fromCode(gradsync_commit_barrier(c.raw(), 30, &changed));
    if (committed.code == GRADSYNC_MEMBERSHIP_CHANGED || (committed.ok() && changed)) {
      if (rejoin(c, step, committed.ok() ? "the commit admitted new ranks" : committed.message)) return 1;
      continue;
    }
    WORKER_CHECK(committed.ok(), "commit after step %d failed: %d %s", step, committed.code, committed.message.c_str());
  }
  std::fprintf(stderr, "[rank %d] the membership never changed\n", c.rank());
  return 1;
}

int elasticLoop(Client& c, const std::vector<std::string>& args) {
  std::vector<float> data(1 << 20);
  return loop(c, args, data.data(), data.size(), false);
}

// elastic_cuda_loop GPUS STEPS SECONDS [commit [EPOCH]]: elastic_loop on a
// tensor of 256 KiB in fake device memory (GPU local rank % GPUS).
int elasticCudaLoop(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(!args.empty(), "elastic_cuda_loop GPUS STEPS SECONDS [commit [EPOCH]]");
  uint8_t* memory = fakeDeviceMemory(c, std::atoi(args[0].c_str()), 1 << 18);
  WORKER_CHECK(memory != nullptr, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  return loop(c, {args.begin() + 1, args.end()}, reinterpret_cast<float*>(memory), (1 << 18) / sizeof(float), true);
}

}  // namespace

const std::map<std::string, Scenario>& elasticScenarios() {
  static const std::map<std::string, Scenario> scenarios = {{"elastic_loop", elasticLoop},
                                                            {"elastic_cuda_loop", elasticCudaLoop}};
  return scenarios;
}

}  // namespace gradsync::worker
