// SPDX-License-Identifier: Apache-2.0
// Element-wise reduction of equally long host arrays, vectorised per dtype:
// the CPU data path of allreduce and reducescatter.
//
// Semantics, per element (pre = prescale, post = postscale):
//  * FLOAT32 / FLOAT64: acc = x0*pre (op) x1*pre (op) ... folded left to right
//    in the type itself; AVERAGE then divides acc by average_divisor; finally
//    acc *= post. For FLOAT32 the factors are rounded to float. A factor that
//    is exactly 1 (and a divisor of 1) is skipped. No FMA contraction, so
//    every CPU computes bit-identical results.
//  * FLOAT16 / BFLOAT16: inputs are widened (exactly) to float32, reduced as
//    FLOAT32 above, and rounded back to nearest even. Overflow gives Inf, NaN
//    stays NaN, fp16 denormals are exact.
//  * MIN / MAX on floating types propagate NaN: a NaN operand gives NaN.
//    Which NaN (payload, sign) a result carries is unspecified.
//  * Integers: SUM and PRODUCT wrap modulo 2^bits (computed unsigned, no UB);
//    MIN / MAX as usual; AVERAGE sums in 64 bits (wrapping at 2^64), divides
//    by average_divisor truncating toward zero, and wraps into the type (which
//    only matters when average_divisor < num_inputs). A prescale or postscale
//    other than 1 is applied as trunc(double(v) * factor), as Horovod does,
//    saturated to the type's range (NaN gives 0); int64 values above 2^53 lose
//    precision in that step.
//  * BOOL: MIN = logical AND, MAX = logical OR; any non-zero byte is true and
//    the output bytes are 0 or 1. prescale and postscale must be 1.
// Arrays must be aligned to their element size. The kernels keep up to 32 KiB
// of blocks on the calling thread's stack.
#pragma once

#include <cstddef>

#include "base/dtype.h"
#include "base/status.h"

namespace gradsync::reduce {

// Arguments of one element-wise reduction of num_inputs equally long arrays.
struct ReduceArgs {
  DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  ReduceOp op = v1::REDUCE_OP_UNSPECIFIED;
  const void* const* inputs = nullptr;  // num_inputs arrays of `count` elements
  int num_inputs = 0;                   // >= 1
  void* const* outputs =
      nullptr;  // num_outputs arrays; each may alias an input exactly (same pointer) but never partially overlap
  int num_outputs = 0;     // >= 1
  double prescale = 1.0;   // applied to each input element before combining
  double postscale = 1.0;  // applied to the combined result
  int average_divisor =
      1;  // AVERAGE: the combined SUM is divided by this (ranks of the process set, which may exceed num_inputs)
};

// Checks dtype/op/counts (BOOL only with MIN/MAX; unknown enums rejected; num_inputs/num_outputs >= 1; average_divisor
// >= 1). Message names the dtype and op.
Status validateReduceArgs(const ReduceArgs& args);

// Reduces elements [begin, end) of every array. Thread-safe for disjoint ranges (callers split one reduction across
// threads). Does not validate: call validateReduceArgs first.
void reduceRange(const ReduceArgs& args, size_t begin, size_t end);

// Combines `count` elements of `theirs` into `mine` (in place) with `op`,
// no scale factors. `theirs_first`: `theirs` is the first operand (the
// daemons' algorithms put the lower node's buffer first, so that partners
// compute bitwise the same result).
void combineInto(DataType dtype, ReduceOp op, const void* theirs, void* mine, size_t count, bool theirs_first);

namespace internal {

// The two compiled variants that reduceRange chooses between at run time;
// exposed for tests and benchmarks. They give bit-identical results.
void reduceRangeBaseline(const ReduceArgs& args, size_t begin, size_t end);
// Requires cpuSupportsAvx2().
void reduceRangeAvx2(const ReduceArgs& args, size_t begin, size_t end);
// Whether this CPU has AVX2, F16C and FMA (checked once).
bool cpuSupportsAvx2();

}  // namespace internal
}  // namespace gradsync::reduce
