// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/reduce/cpu_reduce.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "daemon/collective/reduce/half.h"

// Forces inlining, so that a helper takes the instruction set of the kernel
// it is called from.
#define GS_INLINE inline __attribute__((always_inline))
#define GS_INLINE_LAMBDA __attribute__((always_inline))

namespace gradsync::reduce {
namespace {

std::string describe(const ReduceArgs& args) {
  return " (dtype " + dataTypeName(args.dtype) + ", op " + reduceOpName(args.op) + ")";
}

// The block copies go through the C library's memcpy (AVX2 and ERMS aware):
// inlined, GCC expands a copy of a size it can bound into `rep movsq`, which
// is several times slower on Zen 3. noipa keeps it from learning the bound.
#if defined(__clang__)
__attribute__((noinline))  // clang (fuzz builds only) has no noipa
#else
__attribute__((noipa))
#endif
void copyBytes(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

}  // namespace

Status validateReduceArgs(const ReduceArgs& args) {
  if (elementSize(args.dtype) == 0) {
    return invalidArgument("reduce: unknown dtype" + describe(args));
  }
  if (!reduceOpAllowed(args.dtype, args.op) || args.op == v1::ADASUM) {
    return invalidArgument("reduce: op not allowed for this dtype (Adasum is not element-wise)" + describe(args));
  }
  if (args.num_inputs < 1 || args.inputs == nullptr) {
    return invalidArgument("reduce: need at least one input, got num_inputs " + std::to_string(args.num_inputs) +
                           describe(args));
  }
  if (args.num_outputs < 1 || args.outputs == nullptr) {
    return invalidArgument("reduce: need at least one output, got num_outputs " + std::to_string(args.num_outputs) +
                           describe(args));
  }
  for (int k = 0; k < args.num_inputs; ++k) {
    if (args.inputs[k] == nullptr) {
      return invalidArgument("reduce: input " + std::to_string(k) + " is null" + describe(args));
    }
  }
  for (int j = 0; j < args.num_outputs; ++j) {
    if (args.outputs[j] == nullptr) {
      return invalidArgument("reduce: output " + std::to_string(j) + " is null" + describe(args));
    }
  }
  if (args.average_divisor < 1) {
    return invalidArgument("reduce: average_divisor must be >= 1, got " + std::to_string(args.average_divisor) +
                           describe(args));
  }
  if (args.dtype == v1::BOOL && (args.prescale != 1.0 || args.postscale != 1.0)) {
    return invalidArgument("reduce: prescale and postscale must be 1" + describe(args));
  }
  return okStatus();
}

namespace baseline {
#define GS_REDUCE_AVX2 0
#include "daemon/collective/reduce/cpu_reduce_kernels.inc"
#undef GS_REDUCE_AVX2
}  // namespace baseline

// The AVX2 kernels are GCC-only (its target pragmas); clang builds (the
// fuzz targets) use the baseline kernels everywhere.
#if !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,f16c,fma")
namespace avx2 {
#define GS_REDUCE_AVX2 1
#include "daemon/collective/reduce/cpu_reduce_kernels.inc"
#undef GS_REDUCE_AVX2
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace internal {

void reduceRangeBaseline(const ReduceArgs& args, size_t begin, size_t end) {
  if (begin < end) baseline::reduceRangeImpl(args, begin, end);
}

void reduceRangeAvx2(const ReduceArgs& args, size_t begin, size_t end) {
#if defined(__clang__)
  reduceRangeBaseline(args, begin, end);
#else
  if (begin < end) avx2::reduceRangeImpl(args, begin, end);
#endif
}

bool cpuSupportsAvx2() {
#if defined(__clang__)
  return false;
#else
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  }();
  return supported;
#endif
}

}  // namespace internal

void reduceRange(const ReduceArgs& args, size_t begin, size_t end) {
  if (internal::cpuSupportsAvx2()) {
    internal::reduceRangeAvx2(args, begin, end);
  } else {
    internal::reduceRangeBaseline(args, begin, end);
  }
}

void combineInto(DataType dtype, ReduceOp op, const void* theirs, void* mine, size_t count, bool theirs_first) {
  const void* inputs[2] = {theirs_first ? theirs : mine, theirs_first ? mine : theirs};
  void* outputs[] = {mine};  // aliases an input exactly: allowed
  ReduceArgs args;
  args.dtype = dtype;
  args.op = op;
  args.inputs = inputs;
  args.num_inputs = 2;
  args.outputs = outputs;
  args.num_outputs = 1;
  reduceRange(args, 0, count);
}

}  // namespace gradsync::reduce
