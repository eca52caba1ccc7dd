// SPDX-License-Identifier: Apache-2.0
// The kernels' enums carry the protocol's values.
#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"

namespace gradsync::cuda {

static_assert(static_cast<int>(Dtype::kUint8) == v1::UINT8 && static_cast<int>(Dtype::kInt64) == v1::INT64 &&
              static_cast<int>(Dtype::kFloat16) == v1::FLOAT16 && static_cast<int>(Dtype::kBfloat16) == v1::BFLOAT16 &&
              static_cast<int>(Dtype::kFloat32) == v1::FLOAT32 && static_cast<int>(Dtype::kFloat64) == v1::FLOAT64 &&
              static_cast<int>(Dtype::kBool) == v1::BOOL);
static_assert(static_cast<int>(Op::kSum) == v1::SUM && static_cast<int>(Op::kAverage) == v1::AVERAGE &&
              static_cast<int>(Op::kMin) == v1::MIN && static_cast<int>(Op::kMax) == v1::MAX &&
              static_cast<int>(Op::kProduct) == v1::PRODUCT);

}  // namespace gradsync::cuda
