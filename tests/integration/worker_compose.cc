// SPDX-License-Identifier: Apache-2.0
// Collectives of different kinds (allreduce, broadcast, allgather,
// reducescatter, alltoall) in flight together, some on a process set
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
    const int kinds[] = {GRADSYNC_ALLREDUCE, GRADSYNC_BROADCAST, GRADSYNC_ALLGATHER, GRADSYNC_REDUCESCATTER,
                         GRADSYNC_ALLTOALL};
    p.collective = kinds[stream.below(5)];
    p.on_set = stream.below(2) == 1;
    p.elements = plannedElements(stream);
    // Allgather, alltoall: elements of one row (a rank sends or gathers
    // a few); reducescatter: of one row of 2n + 1 (uneven split).
    if (p.collective == GRADSYNC_ALLGATHER || p.collective == GRADSYNC_ALLTOALL) {
      p.elements = std::max<size_t>(1, p.elements / 4);
    }
    if (p.collective == GRADSYNC_REDUCESCATTER) p.elements = std::max<size_t>(1, p.elements / 16);
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

// Reducescatter: the tensor's rows among `members` ranks (uneven: the
// first rank gets one more).
int64_t scatterRows(size_t members) { return 2 * static_cast<int64_t>(members) + 1; }
int64_t scatterRowsOf(size_t index, size_t members) {
  return scatterRows(members) / static_cast<int64_t>(members) +
         (static_cast<int64_t>(index) < scatterRows(members) % static_cast<int64_t>(members) ? 1 : 0);
}

// Alltoall: rows the member at `from` sends the member at `to` (0 to 2),
// and the value of element `i` of that block.
int64_t blockRows(size_t from, size_t to, int step) { return static_cast<int64_t>((from + 2 * to + step) % 3); }
float blockValue(int rank, size_t to, size_t i) {
  return static_cast<float>(rank * 4096 + static_cast<int>(to) * 64 + static_cast<int>(i % 64));
}

const char* kindName(int collective) {
  switch (collective) {
    case GRADSYNC_ALLREDUCE:
      return "allreduce";
    case GRADSYNC_BROADCAST:
      return "broadcast";
    case GRADSYNC_ALLGATHER:
      return "allgather";
    case GRADSYNC_REDUCESCATTER:
      return "reducescatter";
    default:
      return "alltoall";
  }
}

size_t indexIn(const std::vector<int>& members, int rank) {
  return static_cast<size_t>(std::find(members.begin(), members.end(), rank) - members.begin());
}

struct InFlight {
  const Planned* planned = nullptr;
  int k = 0;
  int64_t rows = 1;             // the tensor's first dimension (allgather, reducescatter, alltoall)
  std::vector<int64_t> splits;  // alltoall: rows to each member
  std::vector<int64_t> shape;   // what the op points to
  std::vector<float> data;
  Operation handle;
};

int checkResult(int step, InFlight& f, const std::vector<int>& members, int me) {
  const Planned& p = *f.planned;
  const char* where = p.on_set ? " on the set" : "";
  if (p.collective == GRADSYNC_REDUCESCATTER || p.collective == GRADSYNC_ALLTOALL) {
    gradsync_result_t out;
    WORKER_OK(f.handle.output(&out));
    const auto* got = static_cast<const float*>(out.data);
    const size_t mine = indexIn(members, me);
    if (p.collective == GRADSYNC_REDUCESCATTER) {
      size_t first_row = 0;
      for (size_t j = 0; j < mine; ++j) first_row += static_cast<size_t>(scatterRowsOf(j, members.size()));
      const int64_t rows = scatterRowsOf(mine, members.size());
      WORKER_CHECK(out.shape[0] == rows, "step %d %s (reducescatter%s): %ld rows, want %ld", step, p.name.c_str(),
                   where, static_cast<long>(out.shape[0]), static_cast<long>(rows));
      for (size_t i = 0; i < static_cast<size_t>(rows) * p.elements; ++i) {
        float want = 0;
        for (int r : members) want += inputOf(r, step, f.k, first_row * p.elements + i);
        WORKER_CHECK(got[i] == want, "step %d %s (reducescatter%s): element %zu = %g, want %g", step, p.name.c_str(),
                     where, i, got[i], want);
      }
      return 0;
    }
    size_t at = 0;
    for (size_t from = 0; from < members.size(); ++from) {
      const int64_t rows = blockRows(from, mine, step);
      WORKER_CHECK(out.received_splits[from] == rows, "step %d %s (alltoall%s): %ld rows from rank %d, want %ld", step,
                   p.name.c_str(), where, static_cast<long>(out.received_splits[from]), members[from],
                   static_cast<long>(rows));
      for (size_t i = 0; i < static_cast<size_t>(rows) * p.elements; ++i, ++at) {
        const float want = blockValue(members[from], mine, i);
        WORKER_CHECK(got[at] == want, "step %d %s (alltoall%s): element %zu from rank %d = %g, want %g", step,
                     p.name.c_str(), where, i, members[from], got[at], want);
      }
    }
    return 0;
  }
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
      WORKER_CHECK(f.data[i] == want, "step %d %s (broadcast of %zu floats from %d%s): element %zu = %g, want %g", step,
                   p.name.c_str(), f.data.size(), p.root, p.on_set ? " on the set" : "", i, f.data[i], want);
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
      const std::vector<int>& members = plan[k].on_set ? set : everyone;
      const size_t mine = indexIn(members, me);
      f->rows = 1;
      if (plan[k].collective == GRADSYNC_ALLGATHER) f->rows = rowsOf(me);
      if (plan[k].collective == GRADSYNC_REDUCESCATTER) f->rows = scatterRows(members.size());
      if (plan[k].collective == GRADSYNC_ALLTOALL) {
        f->rows = 0;
        for (size_t to = 0; to < members.size(); ++to) {
          f->splits.push_back(blockRows(mine, to, step));
          f->rows += f->splits.back();
        }
      }
      f->data.resize(static_cast<size_t>(f->rows) * plan[k].elements);
      size_t at = 0;
      for (size_t to = 0; to < f->splits.size(); ++to) {
        for (size_t i = 0; i < static_cast<size_t>(f->splits[to]) * plan[k].elements; ++i) {
          f->data[at++] = blockValue(me, to, i);
        }
      }
      for (size_t i = 0; f->splits.empty() && i < f->data.size(); ++i) {
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
      f->shape = {static_cast<int64_t>(f->data.size())};
      if (p.collective != GRADSYNC_ALLREDUCE && p.collective != GRADSYNC_BROADCAST) {
        f->shape = {f->rows, static_cast<int64_t>(p.elements)};
      }
      gradsync_op_t op = makeOp(p.collective, p.name.c_str(), f->data.data(), GRADSYNC_FLOAT32, f->shape);
      op.reduce_op = GRADSYNC_SUM;
      if (!f->splits.empty()) {
        op.splits = f->splits.data();
        op.num_splits = static_cast<int32_t>(f->splits.size());
      }
      op.root_rank = p.root;
      op.process_set = p.on_set ? set_id : 0;
      WORKER_OK(c.start(op, &f->handle));
    }
    for (auto& f : flights) {
      Result r = f->handle.wait(120);
      WORKER_CHECK(r.ok(), "step %d %s (%s%s, %zu floats): %d: %s", step, f->planned->name.c_str(),
                   kindName(f->planned->collective), f->planned->on_set ? " on the set" : "", f->data.size(), r.code,
                   r.message.c_str());
      if (checkResult(step, *f, f->planned->on_set ? set : everyone, me)) return 1;
      ++collectives;
    }
  }
  // Every rank stays until the last collective of the set is done: a rank
  // that ends (closes its session) fails the job, even for collectives
  // that do not need it (docs/status.md).
  WORKER_OK(c.barrier());
  std::fprintf(stderr, "[rank %d] COMPOSED OK: %d steps, %d collectives, %.1f s\n", me, steps, collectives,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

}  // namespace

int composedScenario(Client& c, const std::vector<std::string>& args) { return composed(c, args); }

}  // namespace gradsync::worker
