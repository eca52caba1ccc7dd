// SPDX-License-Identifier: Apache-2.0
// Scalar IEEE half (float16) and bfloat16 <-> float32 conversions, bit exact
// with the x86 F16C instructions (round to nearest even, NaN quieted with its
// sign and leading payload bits kept, denormals converted exactly).
#pragma once

#include <cstdint>
#include <cstring>

namespace gradsync::reduce {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The conversions below compute every case and select one, without branches,
// so that GCC vectorises loops over them (with -fno-trapping-math).

// Exact: every half value is a float value. A signalling NaN comes back quiet.
inline float halfToFloat(uint16_t h) {
  const uint32_t x = h & 0x7fffu;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t shifted = x << 13;
  const uint32_t normal = shifted + 0x38000000u;  // rebias the exponent: +112 << 23
  const uint32_t inf_nan = shifted | 0x7f800000u | (x > 0x7c00u ? 0x00400000u : 0u);
  // Zero or denormal: mantissa * 2^-24, exact in float.
  const uint32_t denormal = floatBits(static_cast<float>(static_cast<int32_t>(x)) * 5.9604644775390625e-8f);
  const uint32_t r = x >= 0x7c00u ? inf_nan : (x >= 0x0400u ? normal : denormal);
  return bitsToFloat(sign | r);
}

// Round to nearest even; values of magnitude >= 65520 become Inf; results below
// 2^-14 become half denormals (rounded), or signed zero.
inline uint16_t floatToHalf(float f) {
  const uint32_t bits = floatBits(f);
  const uint32_t u = bits & 0x7fffffffu;
  const uint32_t sign = (bits >> 16) & 0x8000u;
  // NaN: quiet, leading payload bits kept.
  const uint32_t nan = 0x7e00u | ((u >> 13) & 0x3ffu);
  // Below 2^-14: adding 0.5 aligns the value so that the float adder rounds
  // (to nearest even, the default mode) at the half denormal's last bit.
  const uint32_t denormal = floatBits(bitsToFloat(u) + 0.5f) - 0x3f000000u;
  // Normal: rebias the exponent (-112 << 23) and add half an ulp (minus one,
  // plus the lowest kept bit: ties to even); a carry out of the mantissa rounds
  // up to the next binade or to Inf.
  const uint32_t normal = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
  uint32_t h = u < 0x38800000u ? denormal : normal;
  h = u >= 0x47800000u ? 0x7c00u : h;  // >= 2^16 (and Inf): Inf
  h = u > 0x7f800000u ? nan : h;
  return static_cast<uint16_t>(h | sign);
}

// Exact.
inline float bfloat16ToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays NaN (quiet bit set, sign kept) even when its
// payload lies only in the low 16 bits.
inline uint16_t floatToBfloat16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u | 0x00400000u) >> 16);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

}  // namespace gradsync::reduce
