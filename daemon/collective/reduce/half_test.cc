// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/reduce/half.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace gradsync::reduce {
namespace {

// The value of a half, computed from its fields with ldexp (independent of
// the bit tricks of half.h).
double halfValueSlow(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) {
    return mant == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  }
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(HalfTest, HalfToFloatIsExactForEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    const double expected = halfValueSlow(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(HalfTest, RoundTripOfEveryHalf) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = floatToHalf(halfToFloat(static_cast<uint16_t>(h)));
    if ((h & 0x7fff) > 0x7c00) {  // NaN: stays NaN with its sign, quiet
      EXPECT_GT(back & 0x7fff, 0x7c00) << std::hex << h;
      EXPECT_EQ(back & 0x8200, (h & 0x8000) | 0x200) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

// For every pair of adjacent finite halves (and the last finite one and Inf):
// the midpoint goes to the even one, anything just off the midpoint goes to
// the nearer one. Covers denormals, the normal range and overflow.
TEST(HalfTest, FloatToHalfRoundsToNearestEven) {
  for (uint16_t lo = 0; lo < 0x7c00; ++lo) {
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    // Inf counts as 65536 here: the overflow threshold is the midpoint 65520.
    const double hi_value = hi == 0x7c00 ? 65536.0 : halfValueSlow(hi);
    const float mid = static_cast<float>((halfValueSlow(lo) + hi_value) / 2);  // exact
    const uint16_t even = (lo & 1) ? hi : lo;
    ASSERT_EQ(floatToHalf(mid), even) << std::hex << lo;
    ASSERT_EQ(floatToHalf(std::nextafter(mid, 0.0f)), lo) << std::hex << lo;
    ASSERT_EQ(floatToHalf(std::nextafter(mid, INFINITY)), hi) << std::hex << lo;
    ASSERT_EQ(floatToHalf(-mid), even | 0x8000) << std::hex << lo;
    ASSERT_EQ(floatToHalf(-std::nextafter(mid, 0.0f)), lo | 0x8000) << std::hex << lo;
  }
}

TEST(HalfTest, FloatToHalfSpecialValues) {
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(floatToHalf(FLT_MAX), 0x7c00);
  EXPECT_EQ(floatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(floatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(floatToHalf(1e-40f), 0x0000);  // float denormal
  EXPECT_EQ(floatToHalf(-1e-40f), 0x8000);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  const uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_GT(nan & 0x7fff, 0x7c00);
  // A NaN whose payload lies only in bits that half drops stays NaN.
  EXPECT_GT(floatToHalf(bitsToFloat(0x7f800001u)) & 0x7fff, 0x7c00);
  EXPECT_EQ(floatToHalf(bitsToFloat(0xff800001u)) & 0xfe00, 0xfe00);
}

TEST(HalfTest, RandomFloatsMatchNearestHalf) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-30.0, 17.0);
  for (int i = 0; i < 200000; ++i) {
    const float f = static_cast<float>(std::exp2(exponent(rng))) * ((i & 1) ? -1.0f : 1.0f);
    const uint16_t h = floatToHalf(f);
    const double back = halfValueSlow(h);
    // No finite half is nearer (ties are checked above).
    const double err = std::fabs(back - f);
    if (std::isinf(back)) {
      ASSERT_GE(std::fabs(f), 65520.0f) << f;
      continue;
    }
    const uint16_t up = static_cast<uint16_t>(h + 1);
    const uint16_t down = static_cast<uint16_t>(h - 1);
    if ((up & 0x7fff) < 0x7c00) ASSERT_LE(err, std::fabs(halfValueSlow(up) - f)) << f;
    if ((h & 0x7fff) != 0) ASSERT_LE(err, std::fabs(halfValueSlow(down) - f)) << f;
  }
}

TEST(Bfloat16Test, ToFloatIsExact) {
  EXPECT_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(bfloat16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(floatBits(bfloat16ToFloat(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(bfloat16ToFloat(0x7f80)));
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(0x7fc1)));
  EXPECT_EQ(floatBits(bfloat16ToFloat(0x0001)), 0x00010000u);  // denormal
}

TEST(Bfloat16Test, RoundsToNearestEven) {
  for (uint32_t lo = 0; lo < 0x7f80; ++lo) {
    const uint32_t hi = lo + 1;
    // Inf counts as 2^128 here.
    const double hi_value =
        hi == 0x7f80 ? std::ldexp(1.0, 128) : static_cast<double>(bfloat16ToFloat(static_cast<uint16_t>(hi)));
    const double mid = (static_cast<double>(bfloat16ToFloat(static_cast<uint16_t>(lo))) + hi_value) / 2;
    const float fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid) << std::hex << lo;
    const uint32_t even = (lo & 1) ? hi : lo;
    ASSERT_EQ(floatToBfloat16(fmid), even) << std::hex << lo;
    ASSERT_EQ(floatToBfloat16(std::nextafter(fmid, 0.0f)), lo) << std::hex << lo;
    ASSERT_EQ(floatToBfloat16(std::nextafter(fmid, INFINITY)), hi) << std::hex << lo;
    ASSERT_EQ(floatToBfloat16(-fmid), even | 0x8000) << std::hex << lo;
  }
}

TEST(Bfloat16Test, SpecialValues) {
  EXPECT_EQ(floatToBfloat16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBfloat16(FLT_MAX), 0x7f80);  // rounds up to Inf
  EXPECT_EQ(floatToBfloat16(-FLT_MAX), 0xff80);
  EXPECT_EQ(floatToBfloat16(INFINITY), 0x7f80);
  // NaN stays NaN even when its payload is only in the dropped low bits.
  for (uint32_t bits : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t b = floatToBfloat16(bitsToFloat(bits));
    EXPECT_TRUE(std::isnan(bfloat16ToFloat(b))) << std::hex << bits;
    EXPECT_EQ(b & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
  }
  for (uint32_t b = 0; b <= 0xffff; ++b) {  // exact round trip
    const uint16_t back = floatToBfloat16(bfloat16ToFloat(static_cast<uint16_t>(b)));
    if ((b & 0x7fff) > 0x7f80) {
      ASSERT_TRUE(std::isnan(bfloat16ToFloat(back)));
    } else {
      ASSERT_EQ(back, b);
    }
  }
}

}  // namespace
}  // namespace gradsync::reduce
