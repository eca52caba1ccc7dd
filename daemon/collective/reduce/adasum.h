// SPDX-License-Identifier: Apache-2.0
// Horovod's Adasum of equally long floating-point arrays, one per rank of a
// power-of-two process set, in rank order: the arrays are combined pairwise
// in a binary tree (rank r with r + level, level = 1, 2, 4, ...), each pair
// (a, b) into
//   (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// a coefficient staying 1 when its squared norm is below sqrt(DBL_MIN), as
// in Horovod. That is the result of Horovod's vector-halving,
// distance-doubling Adasum (its dot products and norms are summed over the
// whole tensor). Computed in place, with no memory beyond the arrays: the
// dot products and norms in float64, each combination written back in the
// dtype (as Horovod does); prescale is applied to every input first,
// postscale to the result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace gradsync::reduce {

// `work`: one array of `count` elements of `dtype` (FLOAT16, BFLOAT16,
// FLOAT32, FLOAT64) per rank, a power-of-two number of them, overwritten.
// The result goes to every array of `outputs` (which may be among `work`).
Status adasum(const std::vector<uint8_t*>& work, size_t count, DataType dtype, double prescale, double postscale,
              const std::vector<uint8_t*>& outputs);

}  // namespace gradsync::reduce
