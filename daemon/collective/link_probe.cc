// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "daemon/collective/recursive_doubling.h"
#include "daemon/collective/ring_allreduce.h"

namespace gradsync::collective {
namespace {

// Phases 16 and up of the data plane's tag space (ring 0 and 1, pairwise 2,
// rounds 3, goodbye 4, direct 5, recursive doubling 6, halving 7): one per
// run, each run one message per (sender, stage).
constexpr int kProbePhase = 16;
constexpr int kTimedRuns = 8;  // of each kind, after one that connects
constexpr int kSmallPhase = kProbePhase;
constexpr int kDirectPhase = kSmallPhase + 1 + kTimedRuns;
constexpr int kLargePhase = kDirectPhase + 1 + kTimedRuns;
constexpr int kAgreePhase = kLargePhase + 1 + kTimedRuns;
constexpr size_t kSmallBytes = 8;

using Clock = std::chrono::steady_clock;

double microsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// One recursive doubling run of `bytes` (contents ignored), in microseconds.
StatusOr<double> doublingRun(const MeshContext& mesh, int phase, size_t bytes, std::vector<uint8_t>* buffer) {
  buffer->resize(bytes);
  const auto start = Clock::now();
  RecursiveDoubling run(mesh, phase, bytes);
  RETURN_IF_ERROR(run.run(
      buffer->data(), [](const uint8_t*, uint8_t*, bool) {}, "link probe, " + std::to_string(bytes) + " bytes"));
  return microsSince(start);
}

// One direct exchange of 8 bytes with every other node, in microseconds.
StatusOr<double> directRun(const MeshContext& mesh, int phase) {
  const int n = mesh.size();
  std::vector<uint64_t> slots(n);
  std::vector<transport::RequestPtr> requests;
  const auto start = Clock::now();
  for (int step = 1; step < n; ++step) {
    const int from = (mesh.rank - step + n) % n;
    requests.push_back(
        mesh.peers[from]->irecv(&slots[from], kSmallBytes, ringTag(mesh.tag_key, mesh.id, phase, from, 0, from)));
  }
  for (int step = 1; step < n; ++step) {
    const int to = (mesh.rank + step) % n;
    requests.push_back(mesh.peers[to]->isend(&slots[mesh.rank], kSmallBytes,
                                             ringTag(mesh.tag_key, mesh.id, phase, mesh.rank, 0, mesh.rank)));
  }
  std::vector<transport::Request*> raw;
  for (auto& r : requests) raw.push_back(r.get());
  RETURN_IF_ERROR(mesh.transport->waitAll(raw.data(), raw.size(), mesh.deadline,
                                          "link probe, direct exchange of node " + std::to_string(mesh.rank) +
                                              " with " + std::to_string(n - 1) + " other nodes"));
  return microsSince(start);
}

// The fastest of kTimedRuns runs of `run(phase)`, after an untimed one.
template <typename Run>
StatusOr<double> fastest(int first_phase, Run&& run) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= kTimedRuns; ++i) {
    ASSIGN_OR_RETURN(const double us, run(first_phase + i));
    if (i > 0) best = std::min(best, us);
  }
  return best;
}

}  // namespace

StatusOr<LinkCost> probeLinkCost(const MeshContext& mesh, const LinkCost& defaults) {
  const int n = mesh.size();
  if (n < 2) return defaults;
  if (mesh.rank < 0 || mesh.rank >= n) return invalidArgument("link probe: position outside the mesh");
  // Node 0 takes the most steps; a run lasts as long as its steps.
  const double steps = static_cast<double>(doublingSteps(0, n).size());
  std::vector<uint8_t> buffer;
  ASSIGN_OR_RETURN(const double small_us,
                   fastest(kSmallPhase, [&](int phase) { return doublingRun(mesh, phase, kSmallBytes, &buffer); }));
  const double step_us = small_us / steps;
  LinkCost cost = defaults;
  if (n >= 3 && n <= kDirectProbeMaxNodes) {
    ASSIGN_OR_RETURN(const double direct_us, fastest(kDirectPhase, [&](int phase) { return directRun(mesh, phase); }));
    // direct = latency + 2(n-1) message; a step = latency + 2 message.
    cost.message_us = std::clamp((direct_us - step_us) / (2.0 * (n - 2)), 0.1, 1000.0);
  }
  cost.latency_us = std::clamp(step_us - 2 * cost.message_us, 1.0, 1e6);
  ASSIGN_OR_RETURN(const double large_us,
                   fastest(kLargePhase, [&](int phase) { return doublingRun(mesh, phase, kProbeBytes, &buffer); }));
  // A step of b bytes = latency + 2 message + 2 b per byte.
  cost.byte_us = std::clamp((large_us / steps - step_us) / (2.0 * kProbeBytes), 1e-6, 1.0);
  // The nodes' mean figures, everywhere (the same sums in the same order
  // on every node: recursive doubling combines the lower position first).
  double figures[3] = {cost.latency_us, cost.message_us, cost.byte_us};
  RecursiveDoubling agree(mesh, kAgreePhase, sizeof figures);
  RETURN_IF_ERROR(agree.run(
      reinterpret_cast<uint8_t*>(figures),
      [](const uint8_t* theirs, uint8_t* mine, bool) {
        double a[3], b[3];
        std::memcpy(a, theirs, sizeof a);
        std::memcpy(b, mine, sizeof b);
        for (int i = 0; i < 3; ++i) b[i] += a[i];  // a + b == b + a: the order of the levels is what matters
        std::memcpy(mine, b, sizeof b);
      },
      "link probe, agreeing on the cost"));
  cost.latency_us = figures[0] / n;
  cost.message_us = figures[1] / n;
  cost.byte_us = figures[2] / n;
  return cost;
}

}  // namespace gradsync::collective
