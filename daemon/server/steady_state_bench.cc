// SPDX-License-Identifier: Apache-2.0
// A daemon's side of the steady-state rounds at scale, in one process: T
// cached collectives of W ranks, L of them on this daemon (as the leader
// negotiated them: every rank's request in each), then steps in which every
// local rank holds a request of each, the ready ids are found, and each is
// taken (the response to run, with the local ranks' requests in place).
//
//   bazel run -c opt //daemon/server:steady_state_bench -- [--ranks W] [--tensors T]
//       [--ranks-per-node L] [--steps S]
//
// Prints the median step's time (hold, ready and take) and the heap the
// cached responses hold.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "daemon/server/steady_state.h"

namespace gradsync::server {
namespace {

using Clock = std::chrono::steady_clock;

coordinator::Request requestOf(int rank, int tensor, uint64_t step) {
  coordinator::Request r;
  r.rank = rank;
  r.handle = step * 1000000 + tensor + 1;
  r.name = "model.layers." + std::to_string(tensor) + ".weight.grad";
  r.type = v1::ALLREDUCE;
  r.dtype = v1::FLOAT32;
  r.shape = {1000 + tensor};
  r.op = v1::SUM;
  r.length = 4 * static_cast<uint64_t>(1000 + tensor);
  r.offset = 4096 * static_cast<uint64_t>(tensor);
  return r;
}

int run(int ranks, int tensors, int local, int steps) {
  SteadyState state;
  const size_t heap_before = mallinfo2().uordblks;
  std::set<int> mine;
  for (int r = 0; r < local; ++r) mine.insert(r);
  for (int t = 0; t < tensors; ++t) {
    coordinator::Response response;
    response.name = requestOf(0, t, 0).name;
    response.type = v1::ALLREDUCE;
    for (int r = 0; r < ranks; ++r) {
      response.ranks.push_back(r);
      response.requests.push_back(requestOf(r, t, 0));
    }
    state.learn(static_cast<uint64_t>(t + 1), std::move(response), mine);
  }
  const double heap_mib = static_cast<double>(mallinfo2().uordblks - heap_before) / (1 << 20);
  std::vector<double> ms;
  for (int step = 1; step <= steps; ++step) {
    const auto start = Clock::now();
    for (int r = 0; r < local; ++r) {
      for (int t = 0; t < tensors; ++t)
        state.hold(static_cast<uint64_t>(t + 1), {nullptr, requestOf(r, t, step), start});
    }
    const auto ready = state.runnable(state.ready());
    size_t requests = 0;
    for (uint64_t id : ready) requests += state.take(id).requests.size();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (static_cast<int>(ready.size()) != tensors || requests != static_cast<size_t>(tensors) * ranks) {
      std::fprintf(stderr, "step %d: %zu ready, %zu requests\n", step, ready.size(), requests);
      return 1;
    }
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "W=%d T=%d L=%d: a daemon's step in the rounds (hold, ready, take) median %.3f ms; cached responses %.1f MiB\n",
      ranks, tensors, local, ms[ms.size() / 2], heap_mib);
  return 0;
}

}  // namespace
}  // namespace gradsync::server

int main(int argc, char** argv) {
  int ranks = 64, tensors = 161, local = 8, steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ranks"))
      ranks = v;
    else if (!std::strcmp(argv[i], "--tensors"))
      tensors = v;
    else if (!std::strcmp(argv[i], "--ranks-per-node"))
      local = v;
    else if (!std::strcmp(argv[i], "--steps"))
      steps = v;
  }
  if (ranks < local || local < 1 || tensors < 1 || steps < 1) {
    std::fprintf(stderr, "need --ranks >= --ranks-per-node >= 1, --tensors >= 1, --steps >= 1\n");
    return 64;
  }
  return gradsync::server::run(ranks, tensors, local, steps);
}
