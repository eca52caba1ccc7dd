// SPDX-License-Identifier: Apache-2.0
// Collectives of different kinds in flight together, some on a process set
// and some on the whole job, submitted in a different order on each rank:
// what Horovod process sets, DDP beside a subgroup and FSDP's hybrid
// meshes do every step. Every rank derives the same program from the seed,
// checks every result against values it computes itself, and names the
// step, the collective and the element that differ.
//
//   worker composed SEED STEPS SET
//     SET: the ranks of the process set, comma-separated ("0,1").
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <sstream>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

// The same 64-bit stream on every rank from one seed (splitmix64).
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }

 private:
  uint64_t state_;
};

std::vector<int> parseRanks(const std::string& list) {
  std::vector<int> ranks;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) ranks.push_back(std::stoi(item));
  }
  return ranks;
}

// One collective of a step, the same on every rank.
struct Planned {
  int collective = GRADSYNC_ALLREDUCE;
  bool on_set = false;
  size_t elements = 1;  // allreduce, broadcast: the tensor; allgather: one row's
  int root = 0;         // broadcast: a member of the group
  std::string name;
};

// 4 B to 12 MiB, spread over the powers of two (float32 elements).
size_t plannedElements(Stream& stream) {
  const int log2_bytes = 2 + static_cast<int>(stream.below(22));  // 4 B .. 8 MiB
  size_t bytes = size_t{1} << log2_bytes;
  bytes += stream.below(bytes / 2 + 1);  // not only powers of two: up to 12 MiB
  return std::max<size_t>(1, bytes / 4);
}

std::vector<Planned> planStep(uint64_t seed, int step, const std::vector<int>& set, int size) {
  Stream stream(seed * 1000003 + static_cast<uint64_t>(step));
  const int count = 2 + static_cast<int>(stream.below(5));  // 2-6 in flight
  std::vector<Planned> plan(count);
  for (int k = 0; k < count; ++k) {
    Planned& p = plan[k];
    const int kinds[] = {GRADSYNC_ALLREDUCE, GRADSYNC_BROADCAST, GRADSYNC_ALLGATHER};
    p.collective = kinds[stream.below(3)];
    p.on_set = stream.below(2) == 1;
    p.elements = plannedElements(stream);
    if (p.collective == GRADSYNC_ALLGATHER) p.elements = std::max<size_t>(1, p.elements / 4);
    const int members = p.on_set ? static_cast<int>(set.size()) : size;
    const int pick = static_cast<int>(stream.below(members));
    p.root = p.on_set ? set[pick] : pick;
    p.name = "c." + std::to_string(step) + "." + std::to_string(k);
  }
  return plan;
}

// The value of `rank`'s input at element `i` of collective `k` of `step`:
// small integers, exact in float32 sums over a few ranks.
float inputOf(int rank, int step, int k, size_t i) {
  return static_cast<float>((rank + 1) * 8 + static_cast<int>((i + step + k) % 13));
}

// Allgather rows of `rank` (different on each rank).
int64_t rowsOf(int rank) { return 1 + rank % 3; }

struct InFlight {
  const Planned* planned = nullptr;
  int k = 0;
  std::vector<float> data;
  Operation handle;
};

int checkResult(int step, InFlight& f, const std::vector<int>& members) {
  const Planned& p = *f.planned;
  if (p.collective == GRADSYNC_ALLREDUCE) {
    for (size_t i = 0; i < f.data.size(); ++i) {
      float want = 0;
      for (int r : members) want += inputOf(r, step, f.k, i);
      WORKER_CHECK(f.data[i] == want, "step %d %s (allreduce of %zu floats%s): element %zu = %g, want %g", step,
                   p.name.c_str(), f.data.size(), p.on_set ? " on the set" : "", i, f.data[i], want);
    }
  } else if (p.collective == GRADSYNC_BROADCAST) {
    for (size_t i = 0; i < f.data.size(); ++i) {
      const float want = inputOf(p.root, step, f.k, i);
      WORKER_CHECK(f.data[i] == want, "step %d %s (broadcast of %zu floats from %d%s): element %zu = %g, want %g",
                   step, p.name.c_str(), f.data.size(), p.root, p.on_set ? " on the set" : "", i, f.data[i], want);
    }
  } else {
    gradsync_result_t out;
    WORKER_OK(f.handle.output(&out));
    int64_t total_rows = 0;
    for (int r : members) total_rows += rowsOf(r);
    WORKER_CHECK(out.ndim == 2 && out.shape[0] == total_rows && out.shape[1] == static_cast<int64_t>(p.elements),
                 "step %d %s (allgather%s): shape [%ld, %ld], want [%ld, %zu]", step, p.name.c_str(),
                 p.on_set ? " on the set" : "", static_cast<long>(out.shape[0]), static_cast<long>(out.shape[1]),
                 static_cast<long>(total_rows), p.elements);
    const auto* got = static_cast<const float*>(out.data);
    size_t at = 0;
    for (int r : members) {
      const size_t n = static_cast<size_t>(rowsOf(r)) * p.elements;
      for (size_t i = 0; i < n; ++i, ++at) {
        const float want = inputOf(r, step, f.k, i);
        WORKER_CHECK(got[at] == want, "step %d %s (allgather%s): rank %d's element %zu = %g, want %g", step,
                     p.name.c_str(), p.on_set ? " on the set" : "", r, i, got[at], want);
      }
    }
  }
  return 0;
}

int composed(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() >= 3, "usage: composed SEED STEPS SET");
  const uint64_t seed = std::stoull(args[0]);
  const int steps = std::stoi(args[1]);
  const std::vector<int> set = parseRanks(args[2]);
  const int me = c.rank();
  int32_t set_id = -1;
  WORKER_OK(c.addProcessSet(std::vector<int32_t>(set.begin(), set.end()), &set_id, 30));
  const bool in_set = std::find(set.begin(), set.end(), me) != set.end();
  std::vector<int> everyone(c.size());
  for (int r = 0; r < c.size(); ++r) everyone[r] = r;
  const auto started = std::chrono::steady_clock::now();
  int collectives = 0;
  for (int step = 0; step < steps; ++step) {
    const std::vector<Planned> plan = planStep(seed, step, set, c.size());
    std::vector<std::unique_ptr<InFlight>> flights;
    for (size_t k = 0; k < plan.size(); ++k) {
      if (plan[k].on_set && !in_set) continue;
      auto f = std::make_unique<InFlight>();
      f->planned = &plan[k];
      f->k = static_cast<int>(k);
      const size_t n = plan[k].collective == GRADSYNC_ALLGATHER ? rowsOf(me) * plan[k].elements : plan[k].elements;
      f->data.resize(n);
      for (size_t i = 0; i < n; ++i) {
        // A broadcast's receivers start from values no rank sends.
        const bool receiver = plan[k].collective == GRADSYNC_BROADCAST && plan[k].root != me;
        f->data[i] = receiver ? -1.0f : inputOf(me, step, f->k, i);
      }
      flights.push_back(std::move(f));
    }
    // Each rank submits in an order of its own.
    std::mt19937_64 order(seed ^ (static_cast<uint64_t>(me + 1) << 40) ^ static_cast<uint64_t>(step));
    std::shuffle(flights.begin(), flights.end(), order);
    for (auto& f : flights) {
      const Planned& p = *f->planned;
      std::vector<int64_t> shape = {static_cast<int64_t>(f->data.size())};
      if (p.collective == GRADSYNC_ALLGATHER) shape = {rowsOf(me), static_cast<int64_t>(p.elements)};
      gradsync_op_t op = makeOp(p.collective, p.name.c_str(), f->data.data(), GRADSYNC_FLOAT32, shape);
      op.reduce_op = GRADSYNC_SUM;
      op.root_rank = p.root;
      op.process_set = p.on_set ? set_id : 0;
      WORKER_OK(c.start(op, &f->handle));
    }
    for (auto& f : flights) {
      Result r = f->handle.wait(120);
      WORKER_CHECK(r.ok(), "step %d %s (%s%s, %zu floats): %d: %s", step, f->planned->name.c_str(),
                   f->planned->collective == GRADSYNC_ALLREDUCE   ? "allreduce"
                   : f->planned->collective == GRADSYNC_BROADCAST ? "broadcast"
                                                                  : "allgather",
                   f->planned->on_set ? " on the set" : "", f->data.size(), r.code, r.message.c_str());
      if (checkResult(step, *f, f->planned->on_set ? set : everyone)) return 1;
      ++collectives;
    }
  }
  std::fprintf(stderr, "[rank %d] COMPOSED OK: %d steps, %d collectives, %.1f s\n", me, steps, collectives,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

}  // namespace

int composedScenario(Client& c, const std::vector<std::string>& args) { return composed(c, args); }

}  // namespace gradsync::worker
