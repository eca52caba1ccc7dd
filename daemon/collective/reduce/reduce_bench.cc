// SPDX-License-Identifier: Apache-2.0
// Single-thread throughput of the CPU reduction kernels.
//   bazel run -c opt //daemon/collective/reduce:reduce_bench [-- MiB [runs]]
// (MiB may be fractional: 0.25 measures L2-resident compute speed)
// For each case: the median time of `runs` runs over buffers of MiB MiB each,
// "buf GB/s" = bytes of one buffer / time, "mem GB/s" = bytes of every input
// and output / time (each is read or written once). The plain `a[i] += b[i]`
// float32 loop (3 buffers of traffic) is the yardstick.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "daemon/collective/reduce/cpu_reduce.h"

namespace gradsync::reduce {
namespace {

struct Timing {
  double median;
  double best;
};

Timing timeRuns(int runs, const std::function<void()>& body) {
  body();  // warm up (page faults, caches)
  std::vector<double> seconds;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const auto stop = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds[0]};
}

void report(const std::string& name, Timing t, size_t buffer_bytes, int buffers_of_traffic) {
  const double buf = static_cast<double>(buffer_bytes) / 1e9;
  std::printf("%-48s median %8.3f ms  buf %6.2f GB/s  mem %6.2f GB/s   (best: mem %6.2f GB/s)\n", name.c_str(),
              t.median * 1e3, buf / t.median, buf * buffers_of_traffic / t.median, buf * buffers_of_traffic / t.best);
}

__attribute__((noinline)) void plainAddInPlace(float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

// a, b = a op b, b: an allreduce of two local buffers in place.
void benchCase(const char* label, DataType dtype, ReduceOp op, int num_outputs, size_t bytes, int runs, bool avx2) {
  const size_t count = bytes / elementSize(dtype);
  // Small values (0x3c00 is 1.0 in fp16, 0x3f80 in bf16; float32 bit patterns
  // from 0x01010101 are tiny normals): repeated in-place sums stay finite for
  // a while, and Inf is as fast as finite values anyway.
  std::vector<uint8_t> a(bytes, 0x01), b(bytes, 0x01);
  if (dtype == v1::FLOAT16 || dtype == v1::BFLOAT16) {
    const uint16_t one = dtype == v1::FLOAT16 ? 0x2c00 : 0x3d80;
    for (size_t i = 0; i < count; ++i) {
      reinterpret_cast<uint16_t*>(a.data())[i] = one;
      reinterpret_cast<uint16_t*>(b.data())[i] = one;
    }
  }
  const void* inputs[2] = {a.data(), b.data()};
  void* outputs[2] = {a.data(), b.data()};
  ReduceArgs args;
  args.dtype = dtype;
  args.op = op;
  args.inputs = inputs;
  args.num_inputs = 2;
  args.outputs = outputs;
  args.num_outputs = num_outputs;
  args.average_divisor = 2;
  if (!validateReduceArgs(args).isOk()) {
    std::printf("invalid: %s\n", validateReduceArgs(args).toString().c_str());
    return;
  }
  const Timing s = timeRuns(runs, [&] {
    if (avx2) {
      internal::reduceRangeAvx2(args, 0, count);
    } else {
      internal::reduceRangeBaseline(args, 0, count);
    }
  });
  const std::string name = std::string(label) + (avx2 ? " [avx2]" : " [baseline]");
  report(name, s, bytes, 2 + num_outputs);
}

int benchMain(int argc, char** argv) {
  const double mib = argc > 1 ? std::strtod(argv[1], nullptr) : 64;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 11;
  const size_t bytes = static_cast<size_t>(mib * (1 << 20)) / 64 * 64;
  std::printf("buffers of %g MiB, median of %d runs, 1 thread, cpu avx2+f16c+fma: %s\n", mib, runs,
              internal::cpuSupportsAvx2() ? "yes" : "no");

  {
    std::vector<float> a(bytes / sizeof(float), 1e-3f), b(bytes / sizeof(float), 1e-3f);
    const Timing s = timeRuns(runs, [&] { plainAddInPlace(a.data(), b.data(), a.size()); });
    report("yardstick: float32 a[i] += b[i]", s, bytes, 3);
  }
  std::vector<bool> isas = {false};
  if (internal::cpuSupportsAvx2()) isas.insert(isas.begin(), true);
  for (bool avx2 : isas) {
    benchCase("float32 sum 2 in -> 2 out (in place)", v1::FLOAT32, v1::SUM, 2, bytes, runs, avx2);
    benchCase("float32 sum 2 in -> 1 out (in place)", v1::FLOAT32, v1::SUM, 1, bytes, runs, avx2);
    benchCase("float32 average 2 in -> 2 out", v1::FLOAT32, v1::AVERAGE, 2, bytes, runs, avx2);
    benchCase("float16 sum 2 in -> 2 out (in place)", v1::FLOAT16, v1::SUM, 2, bytes, runs, avx2);
    benchCase("bfloat16 sum 2 in -> 2 out (in place)", v1::BFLOAT16, v1::SUM, 2, bytes, runs, avx2);
    benchCase("float64 sum 2 in -> 2 out (in place)", v1::FLOAT64, v1::SUM, 2, bytes, runs, avx2);
    benchCase("int32 sum 2 in -> 2 out (in place)", v1::INT32, v1::SUM, 2, bytes, runs, avx2);
  }
  return 0;
}

}  // namespace
}  // namespace gradsync::reduce

int main(int argc, char** argv) { return gradsync::reduce::benchMain(argc, argv); }
