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
    case v1::FLOAT64: { double v; std::memcpy(&v, base + 8 * i, 8); return v; }
    case v1::FLOAT32: { float v; std::memcpy(&v, base + 4 * i, 4); return v; }
    case v1::FLOAT16: { uint16_t v; std::memcpy(&v, base + 2 * i, 2); return halfToFloat(v); }
    default: { uint16_t v; std::memcpy(&v, base + 2 * i, 2); return bfloat16ToFloat(v); }
  }
}

void store(uint8_t* base, size_t i, DataType dtype, double value) {
  switch (dtype) {
    case v1::FLOAT64: std::memcpy(base + 8 * i, &value, 8); return;
    case v1::FLOAT32: { const float v = static_cast<float>(value); std::memcpy(base + 4 * i, &v, 4); return; }
    case v1::FLOAT16: { const uint16_t v = floatToHalf(static_cast<float>(value)); std::memcpy(base + 2 * i, &v, 2); return; }
    default: { const uint16_t v = floatToBfloat16(static_cast<float>(value)); std::memcpy(base + 2 * i, &v, 2); return; }
  }
}

// a <- (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b
void combine(std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, a_sq = 0, b_sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    a_sq += a[i] * a[i];
    b_sq += b[i] * b[i];
  }
  const double floor = std::sqrt(DBL_MIN);
  const double a_coeff = a_sq >= floor ? 1.0 - dot / a_sq * 0.5 : 1.0;
  const double b_coeff = b_sq >= floor ? 1.0 - dot / b_sq * 0.5 : 1.0;
  for (size_t i = 0; i < a.size(); ++i) a[i] = a_coeff * a[i] + b_coeff * b[i];
}

}  // namespace

Status adasum(const std::vector<const uint8_t*>& inputs, size_t count, DataType dtype, double prescale,
              double postscale, const std::vector<uint8_t*>& outputs) {
  const size_t n = inputs.size();
  if (n == 0 || (n & (n - 1)) != 0) {
    return invalidArgument("Adasum needs a power-of-two number of inputs, got " + std::to_string(n));
  }
  if (dtype != v1::FLOAT16 && dtype != v1::BFLOAT16 && dtype != v1::FLOAT32 && dtype != v1::FLOAT64) {
    return invalidArgument("Adasum needs a floating-point dtype, got " + dataTypeName(dtype));
  }
  std::vector<std::vector<double>> v(n, std::vector<double>(count));
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) v[r][i] = load(inputs[r], i, dtype) * prescale;
  }
  for (size_t level = 1; level < n; level *= 2) {
    for (size_t r = 0; r < n; r += 2 * level) combine(v[r], v[r + level]);
  }
  for (uint8_t* out : outputs) {
    for (size_t i = 0; i < count; ++i) store(out, i, dtype, v[0][i] * postscale);
  }
  return okStatus();
}

}  // namespace gradsync::reduce
