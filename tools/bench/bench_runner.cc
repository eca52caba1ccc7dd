// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gradsync/gradsync.hpp"
#include "tools/bench/bench_memory.h"
#include "tools/bench/resnet50_shapes.h"

namespace gradsync::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxIters = 20000;

struct Ctx {
  Client& client;
  const BenchOptions& options;
  int rank, size;
  BenchMemory& memory;
  float* gather_output = nullptr;  // CUDA allgather: the caller-sized output
  uint64_t gather_bytes = 0;
  std::vector<int64_t> splits;  // alltoall: rows to each rank (count / n, the first count % n one more)
};

gradsync_op_t opFor(Ctx& c, const std::string& name, void* data, const int64_t* shape) {
  gradsync_op_t op;
  gradsync_op_init(&op);
  op.name = name.c_str();
  op.data = data;
  op.dtype = GRADSYNC_FLOAT32;
  op.ndim = 1;
  op.shape = shape;
  op.reduce_op = GRADSYNC_SUM;
  if (c.options.collective == "broadcast") op.collective = GRADSYNC_BROADCAST;
  if (c.options.collective == "allgather") op.collective = GRADSYNC_ALLGATHER;
  if (c.options.collective == "reducescatter") op.collective = GRADSYNC_REDUCESCATTER;
  if (c.options.collective == "alltoall") {
    op.collective = GRADSYNC_ALLTOALL;
    c.splits.assign(c.size, shape[0] / c.size);
    for (int64_t j = 0; j < shape[0] % c.size; ++j) ++c.splits[j];
    op.splits = c.splits.data();
    op.num_splits = c.size;
  }
  op.device = c.memory.device();
  if (op.device == GRADSYNC_DEVICE_CUDA && op.collective == GRADSYNC_ALLGATHER) {
    op.output = c.gather_output;
    op.output_bytes = c.gather_bytes * static_cast<uint64_t>(c.size);
  }
  return op;
}

bool runOnce(Ctx& c, const gradsync_op_t& op, const float** output = nullptr) {
  Operation h;
  Result r = c.client.start(op, &h);
  if (r.ok()) r = h.wait();
  if (!r.ok()) {
    std::fprintf(stderr, "[rank %d] %s failed: %s\n", c.rank, op.name, r.message.c_str());
    return false;
  }
  if (op.device == GRADSYNC_DEVICE_CUDA) c.memory.finish();  // the result is there once the stream ran
  if (output) {
    gradsync_result_t out;
    h.output(&out);
    *output = static_cast<const float*>(out.data);
  }
  return true;
}

// MAX over ranks of `values` (in place).
bool maxOverRanks(Ctx& c, std::vector<double>& values, const std::string& name) {
  std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
  gradsync_op_t op;
  gradsync_op_init(&op);
  op.name = name.c_str();
  op.data = values.data();
  op.dtype = GRADSYNC_FLOAT64;
  op.ndim = 1;
  op.shape = shape.data();
  op.reduce_op = GRADSYNC_MAX;
  return runOnce(c, op);
}

bool check(Ctx& c, float* buf, size_t count, const int64_t* shape, const std::string& name) {
  c.memory.fill(buf, count, static_cast<float>(c.rank + 1));
  const float* gathered_at = nullptr;
  c.gather_bytes = count * 4;
  if (!runOnce(c, opFor(c, name, buf, shape), &gathered_at)) return false;
  const int n = c.size;
  if (c.options.collective == "allgather") {
    const std::vector<float> gathered = c.memory.read(gathered_at, count * n);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < n; ++r) {
        if (gathered[r * count + i] != r + 1) return false;
      }
    }
    return true;
  }
  if (c.options.collective == "alltoall") {  // this rank's rows from each rank i, valued i + 1
    const size_t rows = count / n + (static_cast<size_t>(c.rank) < count % n ? 1 : 0);
    const std::vector<float> mine = c.memory.read(gathered_at, rows * n);
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < rows; ++k) {
        if (mine[i * rows + k] != i + 1) return false;
      }
    }
    return true;
  }
  if (c.options.collective == "reducescatter") {  // this rank's rows: count / n, the first count % n one more
    const size_t rows = count / n + (static_cast<size_t>(c.rank) < count % n ? 1 : 0);
    const std::vector<float> mine = c.memory.read(gathered_at, rows);
    const float want = n * (n + 1) / 2.0f;
    return std::all_of(mine.begin(), mine.end(), [&](float v) { return v == want; });
  }
  const std::vector<float> result = c.memory.read(buf, count);
  const float want = c.options.collective == "broadcast" ? 1.0f : n * (n + 1) / 2.0f;
  return std::all_of(result.begin(), result.end(), [&](float v) { return v == want; });
}

const char* pathName(const Ctx& c) {
  if (c.memory.device() == GRADSYNC_DEVICE_CUDA) return "cuda";
  return c.options.zero_copy ? "zerocopy" : "copy";
}

double busFactor(const std::string& collective, int n) {
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "allgather" || collective == "reducescatter" || collective == "alltoall")
    return static_cast<double>(n - 1) / n;
  return 1.0;
}

bool timeSize(Ctx& c, float* buf, uint64_t bytes) {
  const size_t count = std::max<uint64_t>(1, bytes / 4);
  const int64_t shape[1] = {static_cast<int64_t>(count)};
  const std::string name = "bench." + std::to_string(bytes);
  const bool ok = check(c, buf, count, shape, name + ".check");
  c.memory.fill(buf, count, 0.0f);
  const gradsync_op_t op = opFor(c, name, buf, shape);
  for (int i = 0; i < 5; ++i) runOnce(c, op);
  std::vector<double> times;
  for (;;) {
    for (int i = 0; i < 10; ++i) {
      if (c.options.barrier && !c.client.barrier().ok()) return false;
      const auto t0 = Clock::now();
      if (!runOnce(c, op)) return false;
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    double total = 0;
    for (double t : times) total += t;
    std::vector<double> decide = {total};
    // One name for every decision: a training loop's names repeat too (the
    // daemons' response cache and steady state assume so).
    if (!maxOverRanks(c, decide, name + ".decide")) return false;
    if ((static_cast<int>(times.size()) >= c.options.min_iters && decide[0] >= c.options.min_time) ||
        times.size() >= kMaxIters) {
      break;
    }
  }
  if (!maxOverRanks(c, times, name + ".times")) return false;
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double data_bytes = c.options.collective == "allgather" ? static_cast<double>(count) * 4 * c.size : count * 4.0;
  const double algbw = data_bytes / median / 1e9;
  const double busbw = algbw * busFactor(c.options.collective, c.size);
  if (c.rank == 0) {
    std::printf("%12llu %10zu %8zu %12.1f %12.1f %12.1f %9.3f %9.3f  %s\n", static_cast<unsigned long long>(count * 4),
                count, times.size(), median * 1e6, times[times.size() / 10] * 1e6, times[times.size() * 9 / 10] * 1e6,
                algbw, busbw, ok ? "OK" : "WRONG");
    std::printf("CSV,gradsync-%s,%s,%d,%zu,%zu,%.3f,%.3f,%.3f,%s\n", pathName(c), c.options.collective.c_str(), c.size,
                count * 4, times.size(), median * 1e6, algbw, busbw, ok ? "OK" : "WRONG");
    std::fflush(stdout);
  }
  return ok;
}

int runSweep(Ctx& c) {
  float* buf = c.memory.allocate(std::max<uint64_t>(c.options.max_bytes, 4));
  if (buf == nullptr) return 1;
  if (c.options.collective == "allgather" && c.memory.device() == GRADSYNC_DEVICE_CUDA) {
    c.gather_output = c.memory.allocate(std::max<uint64_t>(c.options.max_bytes, 4) * c.size);
    if (c.gather_output == nullptr) return 1;
  }
  if (c.rank == 0) {
    std::printf("# gradsync_bench %s, %d ranks, float32 sum, %s path\n", c.options.collective.c_str(), c.size,
                c.memory.describe());
    std::printf("%12s %10s %8s %12s %12s %12s %9s %9s  %s\n", "bytes", "count", "iters", "median_us", "p10_us",
                "p90_us", "algbw", "busbw", "check");
  }
  std::vector<uint64_t> sizes;
  if (c.options.step_factor == 0) {
    for (uint64_t b : {4ull, 4ull << 10, 64ull << 10, 1ull << 20, 16ull << 20, 64ull << 20, 256ull << 20}) {
      if (b >= c.options.min_bytes && b <= c.options.max_bytes) sizes.push_back(b);
    }
  } else {
    for (uint64_t b = c.options.min_bytes; b <= c.options.max_bytes; b *= c.options.step_factor) sizes.push_back(b);
  }
  bool all_ok = true;
  for (uint64_t bytes : sizes) all_ok &= timeSize(c, buf, bytes);
  return all_ok ? 0 : 1;
}

int runResnet(Ctx& c) {
  const auto shapes = resnet50Shapes();
  std::vector<float*> tensors;
  std::vector<size_t> counts;
  size_t total = 0;
  for (size_t t = 0; t < shapes.size(); ++t) {
    size_t count = 1;
    for (int64_t d : shapes[t]) count *= static_cast<size_t>(d);
    counts.push_back(count);
    total += count;
    tensors.push_back(c.memory.allocate(count * 4));
    if (!tensors.back()) return 1;
  }
  std::vector<double> times;
  bool ok = true;
  for (int step = 0; step < c.options.steps + 3; ++step) {
    if (step <= 1) {  // inputs for the check, then zeros (as the peers' harness)
      for (size_t t = 0; t < shapes.size(); ++t) c.memory.fill(tensors[t], counts[t], step == 0 ? c.rank + 1.0f : 0.0f);
    }
    if (!c.client.barrier().ok()) return 1;
    const auto t0 = Clock::now();
    std::vector<Operation> handles(shapes.size());
    std::vector<std::string> names(shapes.size());
    for (size_t k = 0; k < shapes.size(); ++k) {
      const size_t t = shapes.size() - 1 - k;  // backward order
      names[t] = "resnet." + std::to_string(t);
      gradsync_op_t op;
      gradsync_op_init(&op);
      op.name = names[t].c_str();
      op.data = tensors[t];
      op.ndim = static_cast<int32_t>(shapes[t].size());
      op.shape = shapes[t].data();
      op.device = c.memory.device();
      if (!c.client.start(op, &handles[t]).ok()) return 1;
    }
    for (auto& h : handles) ok &= h.wait().ok();
    c.memory.finish();
    if (step >= 3) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (step == 0) {
      for (size_t t = 0; t < shapes.size(); ++t) {
        ok &= c.memory.read(tensors[t] + counts[t] - 1, 1)[0] == c.size * (c.size + 1) / 2.0f;
      }
    }
  }
  if (!maxOverRanks(c, times, "resnet.times")) return 1;
  std::sort(times.begin(), times.end());
  if (c.rank == 0) {
    const double median = times[times.size() / 2];
    std::printf("# ResNet-50 gradients: %zu tensors, %.1f MiB, %d ranks, %s path\n", shapes.size(),
                total * 4 / 1048576.0, c.size, c.memory.describe());
    std::printf("steps %zu  median %.2f ms  fastest %.2f ms  slowest %.2f ms  eff. busbw %.3f GB/s  check %s\n",
                times.size(), median * 1e3, times.front() * 1e3, times.back() * 1e3,
                total * 4.0 * 2 * (c.size - 1) / c.size / median / 1e9, ok ? "OK" : "WRONG");
    std::printf("CSV,gradsync-%s,resnet50,%d,%.3f\n", pathName(c), c.size, median * 1e3);
  }
  return ok ? 0 : 1;
}

}  // namespace

int runRank(const BenchOptions& options) {
  Client client;
  Result r = Client::connect(&client);
  if (!r.ok()) {
    std::fprintf(stderr, "gradsync_bench: connect failed: %s\n", r.message.c_str());
    return 2;
  }
  const std::string kind = options.device == "cuda" ? "cuda" : options.zero_copy ? "arena" : "heap";
  auto memory = makeBenchMemory(kind, client, client.localRank());
  if (!memory) return 2;
  Ctx c{client, options, client.rank(), client.size(), *memory, nullptr, 0, {}};
  return options.resnet ? runResnet(c) : runSweep(c);
}

}  // namespace gradsync::bench
