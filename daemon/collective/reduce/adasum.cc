// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/reduce/adasum.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "daemon/collective/reduce/half.h"

namespace gradsync::reduce {
namespace {

double load(const uint8_t* base, size_t i, DataType dtype) {
  switch (dtype) {
    case v1::FLOAT64: {
      double v;
      std::memcpy(&v, base + 8 * i, 8);
      return v;
    }
    case v1::FLOAT32: {
      float v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    case v1::FLOAT16: {
      uint16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      return halfToFloat(v);
    }
    default: {
      uint16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      return bfloat16ToFloat(v);
    }
  }
}

void store(uint8_t* base, size_t i, DataType dtype, double value) {
  switch (dtype) {
    case v1::FLOAT64:
      std::memcpy(base + 8 * i, &value, 8);
      return;
    case v1::FLOAT32: {
      const float v = static_cast<float>(value);
      std::memcpy(base + 4 * i, &v, 4);
      return;
    }
    case v1::FLOAT16: {
      const uint16_t v = floatToHalf(static_cast<float>(value));
      std::memcpy(base + 2 * i, &v, 2);
      return;
    }
    default: {
      const uint16_t v = floatToBfloat16(static_cast<float>(value));
      std::memcpy(base + 2 * i, &v, 2);
      return;
    }
  }
}

// a <- (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b: the dot product and
// norms in float64, the update written back into a's array in the dtype.
void combine(uint8_t* a, const uint8_t* b, size_t count, DataType dtype) {
  double dot = 0, a_sq = 0, b_sq = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = load(a, i, dtype), y = load(b, i, dtype);
    dot += x * y;
    a_sq += x * x;
    b_sq += y * y;
  }
  const double floor = std::sqrt(DBL_MIN);
  const double a_coeff = a_sq >= floor ? 1.0 - dot / a_sq * 0.5 : 1.0;
  const double b_coeff = b_sq >= floor ? 1.0 - dot / b_sq * 0.5 : 1.0;
  for (size_t i = 0; i < count; ++i) store(a, i, dtype, a_coeff * load(a, i, dtype) + b_coeff * load(b, i, dtype));
}

void scale(uint8_t* dst, const uint8_t* src, size_t count, DataType dtype, double factor) {
  for (size_t i = 0; i < count; ++i) store(dst, i, dtype, load(src, i, dtype) * factor);
}

}  // namespace

Status adasum(const std::vector<uint8_t*>& work, size_t count, DataType dtype, double prescale, double postscale,
              const std::vector<uint8_t*>& outputs) {
  const size_t n = work.size();
  if (n == 0 || (n & (n - 1)) != 0) {
    return invalidArgument("Adasum needs a power-of-two number of inputs, got " + std::to_string(n));
  }
  if (!reduceOpAllowed(dtype, v1::ADASUM)) {
    return invalidArgument("Adasum needs a floating-point dtype, got " + dataTypeName(dtype));
  }
  if (prescale != 1.0) {
    for (uint8_t* w : work) scale(w, w, count, dtype, prescale);
  }
  for (size_t level = 1; level < n; level *= 2) {
    for (size_t r = 0; r < n; r += 2 * level) combine(work[r], work[r + level], count, dtype);
  }
  // work[0] holds the result: the other outputs first, work[0] (when it is
  // an output too) last.
  bool result_is_output = false;
  for (uint8_t* out : outputs) {
    if (out == work[0]) {
      result_is_output = true;
    } else {
      scale(out, work[0], count, dtype, postscale);
    }
  }
  if (result_is_output && postscale != 1.0) scale(work[0], work[0], count, dtype, postscale);
  return okStatus();
}

}  // namespace gradsync::reduce
