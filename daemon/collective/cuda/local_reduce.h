// SPDX-License-Identifier: Apache-2.0
// Element-wise reduction of CUDA buffers of one GPU (the ranks sharing it),
// written to one or more outputs, enqueued on a stream. The semantics are
// those of the CPU kernels (daemon/collective/reduce/cpu_reduce.h), so a job
// gets the same numbers on either path: float16/bfloat16 accumulate in
// float32 and round to nearest even; integer SUM/PRODUCT wrap; AVERAGE on
// integers sums in 64 bits and truncates; scale factors on integers round to
// nearest even and saturate; BOOL MIN/MAX are AND/OR; MIN/MAX propagate NaN.
//
// This header is plain C++ (no CUDA types) so that code compiled by g++ can
// call into the nvcc-compiled kernels.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync::cuda {

// Buffers one launch can combine: the ranks of a job that share one GPU.
constexpr int kMaxLocalBuffers = 32;

// Same values as gradsync.v1.DataType / ReduceOp (checked in local_reduce_check.cc).
enum class Dtype : int32_t {
  kUint8 = 1,
  kInt8,
  kUint16,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
  kBool
};
enum class Op : int32_t { kSum = 1, kAverage, kMin, kMax, kProduct };

struct LocalReduceArgs {
  Dtype dtype = Dtype::kFloat32;
  Op op = Op::kSum;
  const void* inputs[kMaxLocalBuffers] = {};
  int num_inputs = 0;
  // Outputs may be the inputs themselves (in place) but never overlap them
  // partially.
  void* outputs[kMaxLocalBuffers] = {};
  int num_outputs = 0;
  uint64_t count = 0;  // elements per buffer
  double prescale = 1.0;
  double postscale = 1.0;
  int average_divisor = 1;
};

// Enqueues the reduction on `stream` (a cudaStream_t). Returns "" or the CUDA
// launch error's text. The caller validated dtype/op (cpu_reduce's rules).
std::string launchLocalReduce(const LocalReduceArgs& args, void* stream);

}  // namespace gradsync::cuda
