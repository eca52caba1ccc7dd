// SPDX-License-Identifier: Apache-2.0
// A random program of collectives, the same on every rank from one seed:
// every kind (allreduce, grouped allreduce, broadcast, allgather,
// reducescatter, alltoall), every dtype and reduction the kind takes, sizes
// from 0 elements to a few MiB, random roots and splits, on the whole job or
// on process sets that may leave whole daemons out, several in flight,
// submitted in an order of each rank's own. Every result is checked against
// values the rank computes itself.
//
// With a fault, one rank (the victim) does it when it submits its op number
// OP, or from a timer thread MS milliseconds into its program (in the
// middle of a wait, a transfer, a round), or at the final barrier if its
// program ended first: kills or stops itself, or kills or stops its daemon
// (PID). The other ranks print the
// first error they get, with the time, and end: the test checks that every
// survivor got one, naming the cause, in time.
//
//   worker random SEED STEPS SETS FAULT
//     SETS: process sets, ';' between sets, ',' between ranks ("0,1;2"), or "-"
//     FAULT: "none" or KIND:RANK:OP[:PID] or KIND:RANK:@MS[:PID], KIND one
//            of kill-rank, stop-rank, kill-daemon, stop-daemon
//
// Lines for the test: "FAULT <steady ns> ...", "NAMED <steady ns> <code>:
// <message>", "RANDOM OK ... by group N,N,..." (collectives per group:
// the job, then each set).
#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The same stream on every rank from one seed.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_++ * 0x2545f4914f6cdd1dull); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }

 private:
  uint64_t state_;
};

int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<std::vector<int>> parseSets(const std::string& text) {
  std::vector<std::vector<int>> sets;
  if (text == "-" || text.empty()) return sets;
  std::stringstream all(text);
  std::string one;
  while (std::getline(all, one, ';')) {
    std::vector<int> ranks;
    std::stringstream in(one);
    std::string item;
    while (std::getline(in, item, ',')) ranks.push_back(std::stoi(item));
    std::sort(ranks.begin(), ranks.end());
    sets.push_back(ranks);
  }
  return sets;
}

enum class Kind { kAllreduce, kGrouped, kBroadcast, kAllgather, kReducescatter, kAlltoall };

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kGrouped:
      return "grouped allreduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kReducescatter:
      return "reducescatter";
    default:
      return "alltoall";
  }
}

const char* reduceName(int op) {
  switch (op) {
    case GRADSYNC_SUM:
      return "sum";
    case GRADSYNC_AVERAGE:
      return "average";
    case GRADSYNC_MIN:
      return "min";
    case GRADSYNC_MAX:
      return "max";
    default:
      return "product";
  }
}

const char* dtypeName(int dtype) {
  static const char* names[] = {"?",     "uint8",   "int8",     "uint16",  "int16",   "int32",
                                "int64", "float16", "bfloat16", "float32", "float64", "bool"};
  return dtype >= 1 && dtype <= 11 ? names[dtype] : "?";
}

// One tensor of a planned collective.
struct PlannedTensor {
  int dtype = GRADSYNC_FLOAT32;
  int reduce_op = GRADSYNC_SUM;
  size_t elements = 1;    // allreduce, broadcast: the tensor's; the others: one row's
  uint64_t id = 0;        // seeds the tensor's values (new every step)
  uint64_t shape_id = 0;  // seeds its rows (the same where its step repeats)
  std::string name;
};

struct Planned {
  Kind kind = Kind::kAllreduce;
  int group = 0;  // 0: the whole job; i: process set i
  int root = 0;   // broadcast
  std::vector<PlannedTensor> tensors;
};

// 0 elements one time in ten, else 1 B to `max_bytes`, log-uniform.
size_t plannedElements(Stream& s, int dtype, size_t max_bytes) {
  if (s.below(10) == 0) return 0;
  int top = 0;
  while ((size_t{2} << top) <= max_bytes) ++top;
  size_t bytes = size_t{1} << s.below(static_cast<uint64_t>(top) + 1);
  bytes = std::min(max_bytes, bytes + s.below(bytes / 2 + 1));
  return std::max<size_t>(1, bytes / dtypeSize(dtype));
}

int plannedDtype(Stream& s) { return 1 + static_cast<int>(s.below(11)); }

int plannedReduce(Stream& s, int dtype, size_t members) {
  if (dtype == GRADSYNC_BOOL) return s.below(2) ? GRADSYNC_MIN : GRADSYNC_MAX;
  const int ops[] = {GRADSYNC_SUM, GRADSYNC_AVERAGE, GRADSYNC_MIN, GRADSYNC_MAX, GRADSYNC_PRODUCT};
  const int op = ops[s.below(5)];
  // Products of values 1 and 2 stay exact in int8 and bfloat16 up to 2^6.
  return op == GRADSYNC_PRODUCT && members > 6 ? GRADSYNC_SUM : op;
}

struct Program {
  uint64_t seed = 0;
  // 0: every step draws new collectives; n: step s repeats the names and
  // shapes of step s % n with new values, as a training loop does (the
  // response cache and the steady state then take them).
  int repeat = 0;
  std::vector<std::vector<int>> groups;  // [0]: every rank; [i]: set i
};

std::vector<Planned> planStep(const Program& program, int step) {
  const int drawn = program.repeat > 0 ? step % program.repeat : step;
  Stream s(program.seed * 1000003 + static_cast<uint64_t>(drawn) * 7919);
  const int count = 2 + static_cast<int>(s.below(7));  // 2 to 8 in flight
  std::vector<Planned> plan(count);
  for (int k = 0; k < count; ++k) {
    Planned& p = plan[k];
    p.kind = static_cast<Kind>(s.below(6));
    p.group = static_cast<int>(s.below(program.groups.size()));
    const std::vector<int>& members = program.groups[p.group];
    p.root = members[s.below(members.size())];
    const int tensors = p.kind == Kind::kGrouped ? 2 + static_cast<int>(s.below(2)) : 1;
    for (int t = 0; t < tensors; ++t) {
      PlannedTensor tensor;
      tensor.dtype = plannedDtype(s);
      // Row kinds carry up to 3 rows a rank (alltoall: a block a peer).
      const bool rows = p.kind == Kind::kAllgather || p.kind == Kind::kReducescatter || p.kind == Kind::kAlltoall;
      tensor.elements = plannedElements(s, tensor.dtype,
                                        rows                       ? (256u << 10)
                                        : p.kind == Kind::kGrouped ? (1u << 20)
                                                                   : (4u << 20));
      tensor.reduce_op = plannedReduce(s, tensor.dtype, members.size());
      tensor.id = mix(program.seed ^ (static_cast<uint64_t>(step) << 20) ^ (static_cast<uint64_t>(k) << 8) ^ t);
      tensor.shape_id = mix(program.seed ^ (static_cast<uint64_t>(drawn) << 20) ^ (static_cast<uint64_t>(k) << 8) ^ t);
      tensor.name = "r." + std::to_string(drawn) + "." + std::to_string(k) + "." + std::to_string(t);
      p.tensors.push_back(tensor);
    }
  }
  return plan;
}

bool reducing(Kind kind) { return kind == Kind::kAllreduce || kind == Kind::kGrouped || kind == Kind::kReducescatter; }

// Element `i` of `rank`'s input: a few small integers (exact in every
// dtype, summed over up to 15 ranks) where the tensor is reduced, values
// up to 96 where it is only moved.
double valueOf(const PlannedTensor& t, bool reduced, int rank, uint64_t i) {
  const uint64_t h = mix(t.id ^ (static_cast<uint64_t>(rank + 1) << 44) ^ i);
  if (t.dtype == GRADSYNC_BOOL) return static_cast<double>(h % 2);
  if (!reduced) return static_cast<double>(h % 97);
  if (t.reduce_op == GRADSYNC_PRODUCT) return static_cast<double>(1 + h % 2);
  return static_cast<double>(h % 5);
}

double reduced(const PlannedTensor& t, const std::vector<int>& members, uint64_t i) {
  double acc = valueOf(t, true, members[0], i);
  for (size_t m = 1; m < members.size(); ++m) acc = combine(t.reduce_op, acc, valueOf(t, true, members[m], i));
  if (t.reduce_op == GRADSYNC_AVERAGE) acc = averaged(t.dtype, acc, static_cast<int>(members.size()));
  return acc;
}

bool matches(int dtype, int reduce_op, double got, double want) {
  if (reduce_op != GRADSYNC_AVERAGE || !isFloat(dtype)) return got == want;
  const double tolerance = dtype == GRADSYNC_FLOAT64 ? 1e-12 : dtype == GRADSYNC_FLOAT32 ? 1e-6 : 1e-2;
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

// Rows a rank holds: allgather (0 to 3, its own), alltoall (0 to 3 to each
// peer), reducescatter (0 to 2n + 1 in all).
int64_t gatherRows(const PlannedTensor& t, int rank) {
  return static_cast<int64_t>(mix(t.shape_id + 11 * rank + 1) % 4);
}
int64_t blockRows(const PlannedTensor& t, int from, int to) {
  return static_cast<int64_t>(mix(t.shape_id + 131 * from + 7 * to + 3) % 4);
}
int64_t scatterRows(const PlannedTensor& t, size_t members) {
  return static_cast<int64_t>(mix(t.shape_id + 5) % (2 * members + 2));
}
// The split gradsync (and Horovod) use: the first rows % n ranks one more.
int64_t scatterRowsOf(int64_t rows, size_t index, size_t members) {
  const auto n = static_cast<int64_t>(members);
  return rows / n + (static_cast<int64_t>(index) < rows % n ? 1 : 0);
}

size_t indexIn(const std::vector<int>& members, int rank) {
  return static_cast<size_t>(std::find(members.begin(), members.end(), rank) - members.begin());
}

// One tensor in flight.
struct Buffer {
  const Planned* planned = nullptr;
  const PlannedTensor* tensor = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  std::vector<uint8_t> bytes;
  Operation handle;
};

// One submission: one buffer, or a grouped allreduce's several.
struct Submission {
  const Planned* planned = nullptr;
  std::vector<std::unique_ptr<Buffer>> buffers;
};

class RandomRun {
 public:
  RandomRun(Client& c, Program program) : c_(c), program_(std::move(program)), me_(c.rank()) {}
  RandomRun(const RandomRun&) = delete;
  RandomRun& operator=(const RandomRun&) = delete;
  ~RandomRun() { stopTimer(); }

  // Fault "KIND:RANK:OP[:PID]" or "KIND:RANK:@MS[:PID]".
  bool parseFault(const std::string& text) {
    if (text == "none") return true;
    std::vector<std::string> parts;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ':')) parts.push_back(item);
    if (parts.size() < 3) return false;
    fault_kind_ = parts[0];
    victim_ = std::stoi(parts[1]);
    if (parts[2].rfind('@', 0) == 0) {
      fault_after_ms_ = std::stoi(parts[2].substr(1));
    } else {
      fault_at_ = std::stoi(parts[2]);
    }
    if (parts.size() > 3) daemon_pid_ = std::stoi(parts[3]);
    return true;
  }

  int run(int steps, const std::vector<int32_t>& set_ids) {
    set_ids_ = set_ids;
    const auto started = std::chrono::steady_clock::now();
    startTimer();
    int collectives = 0;
    std::vector<int> by_group(program_.groups.size(), 0);
    for (int step = 0; step < steps; ++step) {
      const std::vector<Planned> plan = planStep(program_, step);
      std::vector<std::unique_ptr<Submission>> subs;
      for (const Planned& p : plan) {
        const std::vector<int>& members = program_.groups[p.group];
        if (std::find(members.begin(), members.end(), me_) == members.end()) continue;
        subs.push_back(prepare(p));
      }
      std::mt19937_64 order(program_.seed ^ (static_cast<uint64_t>(me_ + 1) << 40) ^ static_cast<uint64_t>(step));
      std::shuffle(subs.begin(), subs.end(), order);
      for (auto& sub : subs) {
        faultPoint();
        if (!submit(*sub)) return exit_code_;
      }
      for (auto& sub : subs) {
        for (auto& b : sub->buffers) {
          Result r = b->handle.wait(120);
          if (!r.ok()) return named(r, *b);
          if (checkResult(*b, step) != 0) return exit_code_;
          ++collectives;
          ++by_group[sub->planned->group];
        }
      }
    }
    stopTimer();
    fault_at_ = submitted_;  // a victim whose program was shorter does it here
    faultPoint();
    Result r = c_.barrier();
    if (!r.ok()) return named(r, "the final barrier");
    std::string groups;
    for (int n : by_group) groups += (groups.empty() ? "" : ",") + std::to_string(n);
    std::fprintf(stderr, "[rank %d] RANDOM OK %d steps, %d collectives, %.1f s, by group %s\n", me_, steps, collectives,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), groups.c_str());
    return fault_kind_.empty() ? 0 : 1;  // a survivor of a fault must not get here
  }

 private:
  std::unique_ptr<Submission> prepare(const Planned& p) {
    auto sub = std::make_unique<Submission>();
    sub->planned = &p;
    const std::vector<int>& members = program_.groups[p.group];
    for (const PlannedTensor& t : p.tensors) {
      auto b = std::make_unique<Buffer>();
      b->planned = &p;
      b->tensor = &t;
      const size_t width = dtypeSize(t.dtype);
      int64_t rows = 1;
      if (p.kind == Kind::kAllgather) rows = gatherRows(t, me_);
      if (p.kind == Kind::kReducescatter) rows = scatterRows(t, members.size());
      if (p.kind == Kind::kAlltoall) {
        rows = 0;
        for (int to : members) {
          b->splits.push_back(blockRows(t, me_, to));
          rows += b->splits.back();
        }
      }
      const bool by_rows = p.kind == Kind::kAllgather || p.kind == Kind::kReducescatter || p.kind == Kind::kAlltoall;
      b->shape = by_rows ? std::vector<int64_t>{rows, static_cast<int64_t>(t.elements)}
                         : std::vector<int64_t>{static_cast<int64_t>(t.elements)};
      const size_t count = static_cast<size_t>(rows) * t.elements;
      b->bytes.assign(std::max<size_t>(1, count * width), 0);
      if (p.kind == Kind::kAlltoall) {
        size_t at = 0;
        for (size_t to = 0; to < members.size(); ++to) {
          for (size_t i = 0; i < static_cast<size_t>(b->splits[to]) * t.elements; ++i) {
            store(t.dtype, b->bytes.data(), at++, valueOf(t, false, me_, blockKey(members[to], i)));
          }
        }
      } else if (p.kind == Kind::kBroadcast && p.root != me_) {
        // Receivers start from a value no root sends (bool: the opposite).
        for (size_t i = 0; i < count; ++i) {
          store(t.dtype, b->bytes.data(), i, t.dtype == GRADSYNC_BOOL ? 1 - valueOf(t, false, p.root, i) : 100);
        }
      } else {
        for (size_t i = 0; i < count; ++i) store(t.dtype, b->bytes.data(), i, valueOf(t, reducing(p.kind), me_, i));
      }
      sub->buffers.push_back(std::move(b));
    }
    return sub;
  }

  // Alltoall: element i of the block for rank `to` (values differ per block).
  static uint64_t blockKey(int to, size_t i) { return (static_cast<uint64_t>(to) << 32) + i; }

  gradsync_op_t opOf(Buffer& b) {
    const Planned& p = *b.planned;
    int collective = GRADSYNC_ALLREDUCE;
    if (p.kind == Kind::kBroadcast) collective = GRADSYNC_BROADCAST;
    if (p.kind == Kind::kAllgather) collective = GRADSYNC_ALLGATHER;
    if (p.kind == Kind::kReducescatter) collective = GRADSYNC_REDUCESCATTER;
    if (p.kind == Kind::kAlltoall) collective = GRADSYNC_ALLTOALL;
    gradsync_op_t op = makeOp(collective, b.tensor->name.c_str(), b.bytes.data(), b.tensor->dtype, b.shape);
    op.reduce_op = b.tensor->reduce_op;
    op.root_rank = p.root;
    op.process_set = set_ids_[p.group];
    if (!b.splits.empty()) {
      op.splits = b.splits.data();
      op.num_splits = static_cast<int32_t>(b.splits.size());
    }
    return op;
  }

  // False when the start failed (named: the run ends with exit_code_).
  bool submit(Submission& sub) {
    ++submitted_;
    if (sub.planned->kind == Kind::kGrouped) {
      std::vector<gradsync_op_t> ops;
      for (auto& b : sub.buffers) ops.push_back(opOf(*b));
      std::vector<Operation> handles;
      Result r = c_.startGroup(ops, &handles);
      if (!r.ok()) return named(r, *sub.buffers[0]), false;
      for (size_t i = 0; i < handles.size(); ++i) sub.buffers[i]->handle = std::move(handles[i]);
      return true;
    }
    Buffer& b = *sub.buffers[0];
    Result r = c_.start(opOf(b), &b.handle);
    if (!r.ok()) return named(r, b), false;
    return true;
  }

  // A timed fault's thread: it does the fault fault_after_ms_ into the
  // program unless stopTimer() came first.
  void startTimer() {
    if (fault_kind_.empty() || me_ != victim_ || fault_after_ms_ < 0) return;
    timer_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(timer_mutex_);
      if (timer_stop_.wait_for(lock, std::chrono::milliseconds(fault_after_ms_), [this] { return timer_stopped_; })) {
        return;
      }
      lock.unlock();
      doFault("after " + std::to_string(fault_after_ms_) + " ms");
    });
  }

  // Ends the timer thread (its fault done or not); a timed fault not done
  // yet is then done at the final barrier.
  void stopTimer() {
    if (!timer_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(timer_mutex_);
      timer_stopped_ = true;
    }
    timer_stop_.notify_all();
    timer_.join();
  }

  void faultPoint() {
    if (fault_kind_.empty() || me_ != victim_ || submitted_ != fault_at_) return;
    doFault("at its submission " + std::to_string(submitted_));
  }

  void doFault(const std::string& when) {
    if (faulted_.exchange(true)) return;
    std::fprintf(stderr, "FAULT %lld %s by rank %d %s\n", static_cast<long long>(steadyNanos()), fault_kind_.c_str(),
                 me_, when.c_str());
    std::fflush(stderr);
    if (fault_kind_ == "kill-rank") ::raise(SIGKILL);
    if (fault_kind_ == "stop-rank") ::raise(SIGSTOP);
    if (fault_kind_ == "kill-daemon") ::kill(daemon_pid_, SIGKILL);
    if (fault_kind_ == "stop-daemon") ::kill(daemon_pid_, SIGSTOP);
    // A signal reaches every thread of the daemon a moment later: until it
    // has, the daemon could still take this rank's next submission.
    if (fault_kind_ == "kill-daemon" || fault_kind_ == "stop-daemon") {
      const char done = fault_kind_ == "kill-daemon" ? 'Z' : 'T';
      for (int i = 0; i < 2000 && !everyDaemonThreadIs(done); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  // Every thread of the daemon in `state` (T stopped, Z exited) or gone.
  bool everyDaemonThreadIs(char state) const {
    const std::string tasks = "/proc/" + std::to_string(daemon_pid_) + "/task";
    DIR* dir = ::opendir(tasks.c_str());
    if (dir == nullptr) return true;
    bool all = true;
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::ifstream in(tasks + "/" + entry->d_name + "/stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto paren = stat.rfind(')');
      if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != state) all = false;
    }
    ::closedir(dir);
    return all;
  }

  // The run's end on an error: exit 0 when a fault was planned (the test
  // judges the error), 1 without one.
  int named(const Result& r, const std::string& what) {
    std::fprintf(stderr, "NAMED %lld %d: %s (at %s)\n", static_cast<long long>(steadyNanos()), r.code,
                 r.message.c_str(), what.c_str());
    if (fault_kind_.empty()) std::fprintf(stderr, "[rank %d] %s failed without a fault\n", me_, what.c_str());
    exit_code_ = fault_kind_.empty() ? 1 : 0;
    return exit_code_;
  }
  int named(const Result& r, const Buffer& b) { return named(r, describe(b)); }

  std::string describe(const Buffer& b) const {
    const Planned& p = *b.planned;
    std::string what = std::string(kindName(p.kind)) + " '" + b.tensor->name + "' of " +
                       std::to_string(b.bytes.size()) + " bytes of " + dtypeName(b.tensor->dtype);
    if (reducing(p.kind)) what += std::string(" (") + reduceName(b.tensor->reduce_op) + ")";
    if (p.kind == Kind::kBroadcast) what += " from rank " + std::to_string(p.root);
    what += p.group == 0 ? " on the job" : " on set " + std::to_string(p.group);
    return what;
  }

  int mismatch(const Buffer& b, int step, const std::string& where, double got, double want) {
    std::fprintf(stderr, "[rank %d] WRONG RESULT, seed %llu step %d, %s: %s = %g, want %g\n", me_,
                 static_cast<unsigned long long>(program_.seed), step, describe(b).c_str(), where.c_str(), got, want);
    exit_code_ = 1;
    return 1;
  }

  int checkResult(Buffer& b, int step) {
    const Planned& p = *b.planned;
    const PlannedTensor& t = *b.tensor;
    const std::vector<int>& members = program_.groups[p.group];
    const size_t mine = indexIn(members, me_);
    if (p.kind == Kind::kAllreduce || p.kind == Kind::kGrouped || p.kind == Kind::kBroadcast) {
      for (size_t i = 0; i < t.elements; ++i) {
        const double got = load(t.dtype, b.bytes.data(), i);
        const double want = p.kind == Kind::kBroadcast ? valueOf(t, false, p.root, i) : reduced(t, members, i);
        if (!matches(t.dtype, t.reduce_op, got, want))
          return mismatch(b, step, "element " + std::to_string(i), got, want);
      }
      return 0;
    }
    gradsync_result_t out;
    out.struct_size = sizeof(out);
    Result r = b.handle.output(&out);
    if (!r.ok()) return named(r, b), 1;
    const auto* got = out.data;
    if (p.kind == Kind::kAllgather) {
      int64_t rows = 0;
      for (int m : members) rows += gatherRows(t, m);
      if (out.ndim != 2 || out.shape[0] != rows || out.shape[1] != static_cast<int64_t>(t.elements)) {
        return mismatch(b, step, "rows", static_cast<double>(out.shape[0]), static_cast<double>(rows));
      }
      size_t at = 0;
      for (int m : members) {
        for (size_t i = 0; i < static_cast<size_t>(gatherRows(t, m)) * t.elements; ++i, ++at) {
          const double want = valueOf(t, false, m, i);
          const double value = load(t.dtype, got, at);
          if (value != want)
            return mismatch(b, step, "rank " + std::to_string(m) + "'s element " + std::to_string(i), value, want);
        }
      }
      return 0;
    }
    if (p.kind == Kind::kReducescatter) {
      const int64_t all = scatterRows(t, members.size());
      int64_t first = 0;
      for (size_t j = 0; j < mine; ++j) first += scatterRowsOf(all, j, members.size());
      const int64_t rows = scatterRowsOf(all, mine, members.size());
      if (out.shape[0] != rows) {
        return mismatch(b, step, "rows", static_cast<double>(out.shape[0]), static_cast<double>(rows));
      }
      for (size_t i = 0; i < static_cast<size_t>(rows) * t.elements; ++i) {
        const double want = reduced(t, members, static_cast<size_t>(first) * t.elements + i);
        const double value = load(t.dtype, got, i);
        if (!matches(t.dtype, t.reduce_op, value, want)) {
          return mismatch(b, step, "element " + std::to_string(i), value, want);
        }
      }
      return 0;
    }
    size_t at = 0;
    for (size_t from = 0; from < members.size(); ++from) {
      const int64_t rows = blockRows(t, members[from], me_);
      if (out.num_received_splits != static_cast<int32_t>(members.size()) || out.received_splits[from] != rows) {
        return mismatch(b, step, "rows from rank " + std::to_string(members[from]),
                        out.num_received_splits > static_cast<int32_t>(from)
                            ? static_cast<double>(out.received_splits[from])
                            : -1.0,
                        static_cast<double>(rows));
      }
      for (size_t i = 0; i < static_cast<size_t>(rows) * t.elements; ++i, ++at) {
        const double want = valueOf(t, false, members[from], blockKey(me_, i));
        const double value = load(t.dtype, got, at);
        if (value != want) {
          return mismatch(b, step, "element " + std::to_string(i) + " from rank " + std::to_string(members[from]),
                          value, want);
        }
      }
    }
    return 0;
  }

  Client& c_;
  Program program_;
  const int me_;
  std::vector<int32_t> set_ids_;
  std::string fault_kind_;  // "" without a fault
  int victim_ = -1;
  int fault_at_ = -1;        // at this submission number
  int fault_after_ms_ = -1;  // or this long into the program
  pid_t daemon_pid_ = -1;
  int submitted_ = 0;
  std::atomic<bool> faulted_{false};
  std::thread timer_;
  std::mutex timer_mutex_;
  std::condition_variable timer_stop_;
  bool timer_stopped_ = false;
  int exit_code_ = 1;
};

int randomProgram(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() >= 4, "usage: random SEED STEPS SETS FAULT [REPEAT]");
  Program program;
  program.seed = std::stoull(args[0]);
  program.repeat = args.size() > 4 ? std::stoi(args[4]) : 0;
  const int steps = std::stoi(args[1]);
  std::vector<int> everyone(c.size());
  for (int r = 0; r < c.size(); ++r) everyone[r] = r;
  program.groups.push_back(everyone);
  std::vector<int32_t> set_ids = {0};
  for (const auto& set : parseSets(args[2])) {
    int32_t id = -1;
    WORKER_OK(c.addProcessSet(std::vector<int32_t>(set.begin(), set.end()), &id, 30));
    program.groups.push_back(set);
    set_ids.push_back(id);
  }
  RandomRun run(c, program);
  WORKER_CHECK(run.parseFault(args[3]), "bad fault %s", args[3].c_str());
  return run.run(steps, set_ids);
}

}  // namespace

int randomScenario(Client& c, const std::vector<std::string>& args) { return randomProgram(c, args); }

}  // namespace gradsync::worker
