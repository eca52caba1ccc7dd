// SPDX-License-Identifier: Apache-2.0
// One rank of an integration test: connects to gradsyncd (GRADSYNC_* from
// the test), runs one scenario, checks every result against a reference
// computed locally, and exits 0 on success.
//
//   worker <scenario> [args...]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

// Input of `rank` at element `i`, chosen so every op's result is exact in
// every dtype for up to 4 ranks (small integers, halves and quarters).
double inputValue(int dtype, int op, int rank, size_t i) {
  if (dtype == GRADSYNC_BOOL) return (i + rank) % 3 != 0;
  if (op == GRADSYNC_PRODUCT)
    return isFloat(dtype) ? ((i + rank) % 3 == 0 ? 0.5 : 1 + (i + rank) % 2) : 1 + (i + rank) % 3;
  const double base = (rank + 1) * ((i % 5) + 1);
  return isFloat(dtype) ? base * 0.25 - 1.0 : base;
}

double expected(int dtype, int op, int size, size_t i, double prescale, double postscale) {
  double acc = inputValue(dtype, op, 0, i) * prescale;
  for (int r = 1; r < size; ++r) {
    acc = combine(op, acc, inputValue(dtype, op, r, i) * prescale);
  }
  if (op == GRADSYNC_AVERAGE) acc = averaged(dtype, acc, size);
  return acc * postscale;
}

double tolerance(int dtype, double value) {
  if (dtype == GRADSYNC_FLOAT16) return 2e-3 * std::max(1.0, std::fabs(value));
  if (dtype == GRADSYNC_BFLOAT16) return 1e-2 * std::max(1.0, std::fabs(value));
  return isFloat(dtype) ? 1e-5 * std::max(1.0, std::fabs(value)) : 0;
}

int allreduceOne(Client& c, int dtype, int op, bool zero_copy, double pre, double post, const std::string& tag,
                 size_t count) {
  const size_t bytes = count * dtypeSize(dtype);
  std::vector<uint8_t> heap(zero_copy ? 0 : bytes);
  void* data = zero_copy ? c.alloc(bytes) : heap.data();
  WORKER_CHECK(data != nullptr, "alloc of %zu bytes", bytes);
  for (size_t i = 0; i < count; ++i) store(dtype, data, i, inputValue(dtype, op, c.rank(), i));
  const std::string name =
      "ar." + tag + "." + std::to_string(dtype) + "." + std::to_string(op) + (zero_copy ? ".z" : ".c");
  const std::vector<int64_t> shape = {static_cast<int64_t>(count)};
  gradsync_op_t desc = makeOp(GRADSYNC_ALLREDUCE, name.c_str(), data, dtype, shape);
  desc.reduce_op = op;
  desc.prescale = pre;
  desc.postscale = post;
  Operation handle;
  WORKER_OK(c.start(desc, &handle));
  WORKER_OK(handle.wait(30));
  for (size_t i = 0; i < count; ++i) {
    const double want = expected(dtype, op, c.size(), i, pre, post);
    const double got = load(dtype, data, i);
    WORKER_CHECK(std::fabs(got - want) <= tolerance(dtype, want), "%s element %zu: got %g want %g", name.c_str(), i,
                 got, want);
  }
  if (zero_copy) c.free(data);
  return 0;
}

// Every dtype and op, zero-copy and not, then scale factors; args: the
// element count (default 2051, not a multiple of any vector width).
int scenarioAllreduce(Client& c, const std::vector<std::string>& args) {
  const size_t count = args.empty() ? 2051 : std::stoul(args[0]);
  const int dtypes[] = {GRADSYNC_UINT8,   GRADSYNC_INT8,    GRADSYNC_UINT16,  GRADSYNC_INT16,
                        GRADSYNC_INT32,   GRADSYNC_INT64,   GRADSYNC_FLOAT16, GRADSYNC_BFLOAT16,
                        GRADSYNC_FLOAT32, GRADSYNC_FLOAT64, GRADSYNC_BOOL};
  const int ops[] = {GRADSYNC_SUM, GRADSYNC_AVERAGE, GRADSYNC_MIN, GRADSYNC_MAX, GRADSYNC_PRODUCT};
  for (int dtype : dtypes) {
    for (int op : ops) {
      if (dtype == GRADSYNC_BOOL && op != GRADSYNC_MIN && op != GRADSYNC_MAX) continue;
      for (bool zero_copy : {true, false}) {
        if (allreduceOne(c, dtype, op, zero_copy, 1.0, 1.0, "plain", count)) return 1;
      }
    }
  }
  // Scale factors on floats.
  for (int dtype : {GRADSYNC_FLOAT16, GRADSYNC_BFLOAT16, GRADSYNC_FLOAT32, GRADSYNC_FLOAT64}) {
    if (allreduceOne(c, dtype, GRADSYNC_SUM, true, 0.5, 4.0, "scaled", count)) return 1;
  }
  return 0;
}

int scenarioAllgather(Client& c, const std::vector<std::string>&) {
  const int cols = 3;
  const int rows = c.rank() + 1;  // different first dimension per rank
  std::vector<int32_t> mine(rows * cols);
  for (int i = 0; i < rows * cols; ++i) mine[i] = c.rank() * 1000 + i;
  gradsync_op_t op = makeOp(GRADSYNC_ALLGATHER, "gather", mine.data(), GRADSYNC_INT32, {rows, cols});
  const std::vector<int64_t> shape = {rows, cols};
  op.shape = shape.data();
  Operation h;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  gradsync_result_t out;
  WORKER_OK(h.output(&out));
  const int total_rows = c.size() * (c.size() + 1) / 2;
  WORKER_CHECK(out.ndim == 2 && out.shape[0] == total_rows && out.shape[1] == cols, "shape [%ld, %ld]",
               static_cast<long>(out.shape[0]), static_cast<long>(out.shape[1]));
  const auto* got = static_cast<const int32_t*>(out.data);
  size_t k = 0;
  for (int r = 0; r < c.size(); ++r) {
    for (int i = 0; i < (r + 1) * cols; ++i, ++k) WORKER_CHECK(got[k] == r * 1000 + i, "element %zu = %d", k, got[k]);
  }
  return 0;
}

// One thread waits for small allreduces while another polls an older
// operation without pause (as the c10d backend's completer does): every
// poll drains the completion ring, and a completion drained there must
// still wake the thread asleep on the ring for it (it once slept until its
// 100 ms slice ended: 2000 allreduces took 15 s instead of 0.8 s).
int scenarioWaiterBesidePoller(Client& c, const std::vector<std::string>&) {
  float first = 1.0f;
  Operation old;
  WORKER_OK(c.start(makeOp(GRADSYNC_ALLREDUCE, "old", &first, GRADSYNC_FLOAT32, {1}), &old));
  WORKER_OK(old.wait(30));
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    while (!stop.load()) (void)old.done();
  });
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  for (int i = 0; i < 2000 && !failed; ++i) {
    float value = 1.0f;
    const std::string name = "small." + std::to_string(i);
    Operation op;
    if (!c.start(makeOp(GRADSYNC_ALLREDUCE, name.c_str(), &value, GRADSYNC_FLOAT32, {1}), &op).ok() ||
        !op.wait(30).ok() || value != static_cast<float>(c.size())) {
      failed = 1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop = true;
  poller.join();
  WORKER_CHECK(!failed, "an allreduce failed");
  WORKER_CHECK(seconds < 6.0, "2000 small allreduces beside a polling thread took %.2f s", seconds);
  return 0;
}

int scenarioBroadcast(Client& c, const std::vector<std::string>&) {
  const int root = c.size() - 1;
  for (int dtype : {GRADSYNC_FLOAT32, GRADSYNC_INT64, GRADSYNC_BFLOAT16, GRADSYNC_BOOL}) {
    const size_t count = 1000;
    std::vector<uint8_t> buf(count * dtypeSize(dtype));
    for (size_t i = 0; i < count; ++i) store(dtype, buf.data(), i, c.rank() == root ? (i % 7) + 1 : 0);
    const std::string name = "bcast." + std::to_string(dtype);
    gradsync_op_t op = makeOp(GRADSYNC_BROADCAST, name.c_str(), buf.data(), dtype, {});
    const std::vector<int64_t> shape = {static_cast<int64_t>(count)};
    op.ndim = 1;
    op.shape = shape.data();
    op.root_rank = root;
    Operation h;
    WORKER_OK(c.start(op, &h));
    WORKER_OK(h.wait(30));
    for (size_t i = 0; i < count; ++i) {
      const double want = dtype == GRADSYNC_BOOL ? 1 : (i % 7) + 1;
      WORKER_CHECK(load(dtype, buf.data(), i) == want, "%s element %zu", name.c_str(), i);
    }
  }
  return 0;
}

int scenarioAlltoall(Client& c, const std::vector<std::string>&) {
  // Rank r sends (j + r) % 3 rows of 2 floats to rank j; values encode (r, j, row).
  const int n = c.size(), r = c.rank();
  std::vector<int64_t> splits(n);
  std::vector<float> data;
  for (int j = 0; j < n; ++j) {
    splits[j] = (j + r) % 3;
    for (int row = 0; row < splits[j]; ++row) {
      data.push_back(r * 100 + j * 10 + row);
      data.push_back(-(r * 100 + j * 10 + row));
    }
  }
  int64_t rows = 0;
  for (auto s : splits) rows += s;
  const std::vector<int64_t> shape = {rows, 2};
  gradsync_op_t op = makeOp(GRADSYNC_ALLTOALL, "a2a", data.data(), GRADSYNC_FLOAT32, shape);
  op.splits = splits.data();
  op.num_splits = n;
  Operation h;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  gradsync_result_t out;
  WORKER_OK(h.output(&out));
  WORKER_CHECK(out.num_received_splits == n, "received %d splits", out.num_received_splits);
  const auto* got = static_cast<const float*>(out.data);
  size_t k = 0;
  for (int i = 0; i < n; ++i) {
    WORKER_CHECK(out.received_splits[i] == (r + i) % 3, "split from %d = %ld", i,
                 static_cast<long>(out.received_splits[i]));
    for (int row = 0; row < (r + i) % 3; ++row, k += 2) {
      WORKER_CHECK(got[k] == i * 100 + r * 10 + row && got[k + 1] == -got[k], "row %d from rank %d", row, i);
    }
  }
  WORKER_CHECK(out.shape[0] == static_cast<int64_t>(k / 2), "output rows %ld", static_cast<long>(out.shape[0]));
  return 0;
}

int scenarioReducescatter(Client& c, const std::vector<std::string>&) {
  const int n = c.size();
  const int64_t dim0 = 2 * n + 1, cols = 3;  // uneven: the first rank gets one extra row
  std::vector<float> data(dim0 * cols);
  for (size_t i = 0; i < data.size(); ++i) data[i] = (c.rank() + 1) * static_cast<float>(i);
  gradsync_op_t op = makeOp(GRADSYNC_REDUCESCATTER, "rs", data.data(), GRADSYNC_FLOAT32, {dim0, cols});
  const std::vector<int64_t> shape = {dim0, cols};
  op.shape = shape.data();
  op.reduce_op = GRADSYNC_SUM;
  Operation h;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  gradsync_result_t out;
  WORKER_OK(h.output(&out));
  const int64_t my_rows = dim0 / n + (c.rank() < dim0 % n ? 1 : 0);
  int64_t start = 0;
  for (int j = 0; j < c.rank(); ++j) start += dim0 / n + (j < dim0 % n ? 1 : 0);
  WORKER_CHECK(out.shape[0] == my_rows && out.shape[1] == cols, "shape [%ld, %ld], want %ld rows",
               static_cast<long>(out.shape[0]), static_cast<long>(out.shape[1]), static_cast<long>(my_rows));
  const auto* got = static_cast<const float*>(out.data);
  const float factor = n * (n + 1) / 2.0f;
  for (int64_t i = 0; i < my_rows * cols; ++i) {
    WORKER_CHECK(got[i] == factor * (start * cols + i), "element %ld = %g", static_cast<long>(i), got[i]);
  }
  return 0;
}

// A grouped allreduce of 6,000 tensors with 250-character names, twice:
// the leader's first batch holds all of them in full (about 5 MB, over
// gRPC's 4 MiB default), the second as cache ids.
int scenarioWideBatch(Client& c, const std::vector<std::string>&) {
  constexpr int kTensors = 6000;
  const std::vector<int64_t> shape = {1};
  for (int step = 0; step < 2; ++step) {
    std::vector<float> values(kTensors);
    std::vector<std::string> names(kTensors);
    std::vector<gradsync_op_t> ops;
    for (int t = 0; t < kTensors; ++t) {
      names[t] = std::string(240, 'w') + "." + std::to_string(t);
      values[t] = static_cast<float>(c.rank() + t);
      ops.push_back(makeOp(GRADSYNC_ALLREDUCE, names[t].c_str(), &values[t], GRADSYNC_FLOAT32, shape));
    }
    std::vector<Operation> handles;
    WORKER_OK(c.startGroup(ops, &handles));
    for (auto& h : handles) WORKER_OK(h.wait(60));
    const int n = c.size();
    for (int t = 0; t < kTensors; ++t) {
      WORKER_CHECK(values[t] == n * (n - 1) / 2.0f + n * t, "step %d tensor %d = %g", step, t, values[t]);
    }
  }
  return 0;
}

int scenarioBarrierGroupedFusion(Client& c, const std::vector<std::string>&) {
  WORKER_OK(c.barrier());
  // Grouped allreduce of three tensors.
  std::vector<std::vector<double>> tensors(3, std::vector<double>(100));
  std::vector<gradsync_op_t> ops;
  const char* names[] = {"g.a", "g.b", "g.c"};
  const std::vector<int64_t> shape = {100};
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 100; ++i) tensors[t][i] = c.rank() + t + i;
    ops.push_back(makeOp(GRADSYNC_ALLREDUCE, names[t], tensors[t].data(), GRADSYNC_FLOAT64, shape));
  }
  std::vector<Operation> handles;
  WORKER_OK(c.startGroup(ops, &handles));
  for (auto& h : handles) WORKER_OK(h.wait(30));
  const int n = c.size();
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 100; ++i) {
      WORKER_CHECK(tensors[t][i] == n * (n - 1) / 2.0 + n * (t + i), "group tensor %d element %d", t, i);
    }
  }
  // Many tensors in flight at once (fused by the daemon), submitted in a
  // different order on each rank.
  const int kTensors = 64;
  std::vector<std::vector<float>> many(kTensors, std::vector<float>(257));
  std::vector<std::string> many_names(kTensors);
  std::vector<Operation> many_handles(kTensors);
  for (int k = 0; k < kTensors; ++k) {
    const int t = c.rank() % 2 ? kTensors - 1 - k : k;
    many_names[t] = "fuse." + std::to_string(t);
    for (auto& v : many[t]) v = static_cast<float>(t + c.rank());
    const std::vector<int64_t> s = {257};
    WORKER_OK(c.start(makeOp(GRADSYNC_ALLREDUCE, many_names[t].c_str(), many[t].data(), GRADSYNC_FLOAT32, s),
                      &many_handles[t]));
  }
  for (int t = 0; t < kTensors; ++t) {
    WORKER_OK(many_handles[t].wait(30));
    WORKER_CHECK(many[t][256] == n * t + n * (n - 1) / 2.0f, "fused tensor %d = %g", t, many[t][256]);
  }
  WORKER_OK(c.barrier());
  return 0;
}

// Large (1.2 MB: a ring of their own across daemons where every node holds
// one rank) and small tensors (fused), float32 average with a postscale,
// zero-copy and copied, four times (the first through the leader, the
// repeats in the steady state, with a late rank), as a group and not.
int scenarioFusedLargeAndSmall(Client& c, const std::vector<std::string>&) {
  const size_t counts[] = {300001, 1000, 300000, 77, 262144};
  const int kTensors = 5;
  for (int step = 0; step < 6; ++step) {
    // At steps 4 and 5 one rank comes late, past the daemons' 200 ms hold
    // of a cached step: the others' requests go on to the leader.
    if (step >= 4 && c.rank() == step % c.size()) usleep(250000);
    std::vector<void*> data(kTensors);
    std::vector<std::vector<uint8_t>> heap(kTensors);
    std::vector<std::string> names(kTensors);
    std::vector<std::vector<int64_t>> shapes(kTensors);  // the ops point at them
    std::vector<gradsync_op_t> ops;
    for (int t = 0; t < kTensors; ++t) {
      const bool zero_copy = t % 2 == 0;
      const size_t bytes = counts[t] * sizeof(float);
      if (zero_copy) {
        data[t] = c.alloc(bytes);
        WORKER_CHECK(data[t] != nullptr, "alloc of %zu bytes", bytes);
      } else {
        heap[t].resize(bytes);
        data[t] = heap[t].data();
      }
      for (size_t i = 0; i < counts[t]; ++i) {
        store(GRADSYNC_FLOAT32, data[t], i, inputValue(GRADSYNC_FLOAT32, GRADSYNC_AVERAGE, c.rank(), i + t));
      }
      names[t] = "mixed." + std::to_string(t);
      shapes[t] = {static_cast<int64_t>(counts[t])};
      ops.push_back(makeOp(GRADSYNC_ALLREDUCE, names[t].c_str(), data[t], GRADSYNC_FLOAT32, shapes[t]));
      ops.back().reduce_op = GRADSYNC_AVERAGE;
      ops.back().postscale = 2.0;
    }
    // Odd steps as one group (which the daemons never split), even ones
    // one by one (held for the rounds).
    std::vector<Operation> handles;
    if (step % 2 == 1) {
      WORKER_OK(c.startGroup(ops, &handles));
    } else {
      handles.resize(kTensors);
      for (int t = 0; t < kTensors; ++t) WORKER_OK(c.start(ops[t], &handles[t]));
    }
    for (auto& h : handles) WORKER_OK(h.wait(30));
    for (int t = 0; t < kTensors; ++t) {
      for (size_t i = 0; i < counts[t]; i += (i % 1000 == 999 ? 1 : 7)) {
        const double want = expected(GRADSYNC_FLOAT32, GRADSYNC_AVERAGE, c.size(), i + t, 1.0, 2.0);
        const double got = load(GRADSYNC_FLOAT32, data[t], i);
        WORKER_CHECK(std::fabs(got - want) <= tolerance(GRADSYNC_FLOAT32, want),
                     "step %d %s element %zu: got %g want %g", step, names[t].c_str(), i, got, want);
      }
      if (t % 2 == 0) c.free(data[t]);
    }
  }
  return 0;
}

// A training loop: `steps` (args[0]) steps of ten gradients from 28 B to
// 4.8 MB (sum, zero copy, each started on its own as DDP's hooks do, then
// all waited for), whose values change every step; every sum is checked.
// Then prints "STEPS DONE" and, given a file (args[1]), waits up to 60 s
// for it to exist before leaving the job, or (args[2]) running that many
// steps more first.
int scenarioTrainingSteps(Client& c, const std::vector<std::string>& args) {
  const int steps = args.empty() ? 20 : std::stoi(args[0]);
  const int steps_after = args.size() > 2 ? std::stoi(args[2]) : 0;
  const size_t counts[] = {1000, 300000, 50000, 700000, 7, 250000, 1200000, 3000, 90000, 400000};
  constexpr int kTensors = 10;
  std::vector<void*> data(kTensors);
  std::vector<std::string> names(kTensors);
  std::vector<std::vector<int64_t>> shapes(kTensors);
  for (int t = 0; t < kTensors; ++t) {
    data[t] = c.alloc(counts[t] * sizeof(float));
    WORKER_CHECK(data[t] != nullptr, "alloc of %zu floats", counts[t]);
    names[t] = "layer" + std::to_string(t) + ".grad";
    shapes[t] = {static_cast<int64_t>(counts[t])};
  }
  const auto run = [&](int first, int count) {
    for (int step = first; step < first + count; ++step) {
      std::vector<Operation> handles(kTensors);
      for (int t = kTensors - 1; t >= 0; --t) {  // backward: the last layer first
        for (size_t i = 0; i < counts[t]; ++i) {
          store(GRADSYNC_FLOAT32, data[t], i, inputValue(GRADSYNC_FLOAT32, GRADSYNC_SUM, c.rank(), i + t * 7 + step));
        }
        WORKER_OK(
            c.start(makeOp(GRADSYNC_ALLREDUCE, names[t].c_str(), data[t], GRADSYNC_FLOAT32, shapes[t]), &handles[t]));
      }
      for (auto& h : handles) WORKER_OK(h.wait(30));
      for (int t = 0; t < kTensors; ++t) {
        for (size_t i = 0; i < counts[t]; i += (i % 1000 == 999 ? 1 : 13)) {
          const double want = expected(GRADSYNC_FLOAT32, GRADSYNC_SUM, c.size(), i + t * 7 + step, 1.0, 1.0);
          const double got = load(GRADSYNC_FLOAT32, data[t], i);
          WORKER_CHECK(got == want, "step %d %s element %zu: got %g want %g", step, names[t].c_str(), i, got, want);
        }
      }
    }
    return 0;
  };
  if (int rc = run(0, steps); rc != 0) return rc;
  std::printf("STEPS DONE\n");
  std::fflush(stdout);
  for (int waited = 0; args.size() > 1 && ::access(args[1].c_str(), F_OK) != 0 && waited < 6000; ++waited) {
    usleep(10000);
  }
  if (int rc = run(steps, steps_after); rc != 0) return rc;
  for (void* d : data) c.free(d);
  return 0;
}

// `steps` steps of `tensors` empty allreduces: the control plane's work
// alone (the data plane has nothing to move). Prints the median step.
int scenarioEmptySteps(Client& c, const std::vector<std::string>& args) {
  const int steps = args.empty() ? 20 : std::stoi(args[0]);
  const int tensors = args.size() > 1 ? std::stoi(args[1]) : 161;
  void* data = c.alloc(64);
  WORKER_CHECK(data != nullptr, "alloc of 64 bytes");
  std::vector<std::string> names(tensors);
  for (int t = 0; t < tensors; ++t) names[t] = "empty." + std::to_string(t);
  const std::vector<int64_t> shape = {0};
  std::vector<double> ms;
  for (int step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<Operation> handles(tensors);
    for (int t = tensors - 1; t >= 0; --t) {
      WORKER_OK(c.start(makeOp(GRADSYNC_ALLREDUCE, names[t].c_str(), data, GRADSYNC_FLOAT32, shape), &handles[t]));
    }
    for (auto& h : handles) WORKER_OK(h.wait(120));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const double first = ms.front();
  std::sort(ms.begin(), ms.end());
  std::printf("EMPTY STEPS %d x %d tensors: median %.3f ms, first %.3f ms\n", steps, tensors, ms[ms.size() / 2], first);
  c.free(data);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: worker <scenario> [args]\n");
    return 64;
  }
  static const std::map<std::string, Scenario> scenarios = {
      {"allreduce", scenarioAllreduce},
      {"allgather", scenarioAllgather},
      {"broadcast", scenarioBroadcast},
      {"waiter_beside_poller", scenarioWaiterBesidePoller},
      {"leave_at_once", [](Client&, const std::vector<std::string>&) { return 0; }},
      {"alltoall", scenarioAlltoall},
      {"reducescatter", scenarioReducescatter},
      {"barrier_grouped_fusion", scenarioBarrierGroupedFusion},
      {"fused_large_and_small", scenarioFusedLargeAndSmall},
      {"training_steps", scenarioTrainingSteps},
      {"wide_batch", scenarioWideBatch},
      {"empty_steps", scenarioEmptySteps},
      {"sharded_steps", shardedStepsScenario},
      {"composed", composedScenario},
      {"random", randomScenario},
  };
  std::string name = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  auto it = scenarios.find(name);
  Scenario fn = nullptr;
  if (it != scenarios.end()) {
    fn = it->second;
  } else if (moreScenarios().count(name)) {
    fn = moreScenarios().at(name);
  } else if (elasticScenarios().count(name)) {
    fn = elasticScenarios().at(name);
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", name.c_str());
    return 64;
  }
  Client client;
  gradsync_config_t config;
  gradsync_config_init(&config);
  // Static process set 1 = {0, 2} for the process-set scenario.
  const int32_t set_ranks[] = {0, 2};
  const int32_t* set_list[] = {set_ranks};
  const int32_t set_sizes[] = {2};
  if (name == "process_sets" || name == "dynamic_process_sets" || name == "set_without_outsider") {
    config.num_process_sets = 1;
    config.process_set_sizes = set_sizes;
    config.process_set_ranks = set_list;
  }
  Result r = Client::connect(&client, &config);
  if (!r.ok()) {
    std::fprintf(stderr, "connect failed (%d): %s\n", r.code, r.message.c_str());
    return 3;
  }
  g_rank = client.rank();
  const int rc = fn(client, args);
  std::fprintf(stderr, "[rank %d] scenario %s %s\n", g_rank, name.c_str(), rc == 0 ? "passed" : "FAILED");
  return rc;
}

}  // namespace
}  // namespace gradsync::worker

int main(int argc, char** argv) { return gradsync::worker::main(argc, argv); }
