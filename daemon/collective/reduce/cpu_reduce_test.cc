// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/reduce/cpu_reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "daemon/collective/reduce/half.h"

namespace gradsync::reduce {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr DataType kAllTypes[] = {v1::UINT8,   v1::INT8,     v1::UINT16,  v1::INT16,   v1::INT32, v1::INT64,
                                  v1::FLOAT16, v1::BFLOAT16, v1::FLOAT32, v1::FLOAT64, v1::BOOL};
constexpr ReduceOp kAllOps[] = {v1::SUM, v1::AVERAGE, v1::MIN, v1::MAX, v1::PRODUCT};

// Which compiled variant runs.
enum class Variant { kDispatch, kBaseline, kAvx2 };

std::vector<Variant> variants() {
  std::vector<Variant> v = {Variant::kDispatch, Variant::kBaseline};
  if (internal::cpuSupportsAvx2()) v.push_back(Variant::kAvx2);
  return v;
}

const char* variantName(Variant v) {
  switch (v) {
    case Variant::kDispatch:
      return "dispatch";
    case Variant::kBaseline:
      return "baseline";
    case Variant::kAvx2:
      return "avx2";
  }
  return "?";
}

void runVariant(Variant v, const ReduceArgs& args, size_t begin, size_t end) {
  switch (v) {
    case Variant::kDispatch:
      reduceRange(args, begin, end);
      break;
    case Variant::kBaseline:
      internal::reduceRangeBaseline(args, begin, end);
      break;
    case Variant::kAvx2:
      internal::reduceRangeAvx2(args, begin, end);
      break;
  }
}

// ---------------------------------------------------------------------------
// Scalar reference, written for clarity.

struct Case {
  DataType dtype;
  ReduceOp op;
  int num_inputs;
  size_t count;
  double prescale = 1.0;
  double postscale = 1.0;
  int divisor = 1;

  std::string describe() const {
    std::ostringstream s;
    s << dataTypeName(dtype) << " " << reduceOpName(op) << " inputs=" << num_inputs << " count=" << count
      << " pre=" << prescale << " post=" << postscale << " divisor=" << divisor;
    return s.str();
  }
};

template <typename T>
T load(const Bytes& b, size_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(Bytes& b, size_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}

template <typename C>
C refFloatOp(ReduceOp op, C a, C b) {
  switch (op) {
    case v1::SUM:
    case v1::AVERAGE:
      return a + b;
    case v1::PRODUCT:
      return a * b;
    case v1::MIN:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
      return b < a ? b : a;
    case v1::MAX:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
      return b > a ? b : a;
    default:
      return 0;
  }
}

// S: stored type, C: compute type.
template <typename S, typename C, typename Widen, typename Narrow>
Bytes referenceFloat(const Case& c, const std::vector<Bytes>& in, Widen widen, Narrow narrow) {
  Bytes out(c.count * sizeof(S));
  const C pre = static_cast<C>(c.prescale);
  const C post = static_cast<C>(c.postscale);
  for (size_t i = 0; i < c.count; ++i) {
    C acc = widen(load<S>(in[0], i)) * pre;
    for (int k = 1; k < c.num_inputs; ++k) acc = refFloatOp<C>(c.op, acc, widen(load<S>(in[k], i)) * pre);
    if (c.op == v1::AVERAGE) acc = acc / static_cast<C>(c.divisor);
    acc = acc * post;
    store<S>(out, i, narrow(acc));
  }
  return out;
}

// trunc(v * f) saturated to T, NaN -> 0.
template <typename T>
T refScaleInt(T v, double f) {
  const double d = std::trunc(static_cast<double>(v) * f);
  if (std::isnan(d)) return 0;
  const int bits = static_cast<int>(sizeof(T) * 8) - (std::is_signed_v<T> ? 1 : 0);
  if (d >= std::ldexp(1.0, bits)) return std::numeric_limits<T>::max();
  if (d < (std::is_signed_v<T> ? -std::ldexp(1.0, bits) : 0.0)) return std::numeric_limits<T>::min();
  return static_cast<T>(d);
}

template <typename T>
Bytes referenceInt(const Case& c, const std::vector<Bytes>& in) {
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  Bytes out(c.count * sizeof(T));
  for (size_t i = 0; i < c.count; ++i) {
    std::vector<T> x;
    for (int k = 0; k < c.num_inputs; ++k) {
      T v = load<T>(in[k], i);
      if (c.prescale != 1.0) v = refScaleInt(v, c.prescale);
      x.push_back(v);
    }
    T r = x[0];
    if (c.op == v1::AVERAGE) {
      uint64_t sum = 0;
      for (T v : x) sum += static_cast<uint64_t>(static_cast<Wide>(v));
      r = static_cast<T>(static_cast<Wide>(sum) / static_cast<Wide>(c.divisor));
    } else {
      for (size_t k = 1; k < x.size(); ++k) {
        switch (c.op) {
          case v1::SUM:
            r = static_cast<T>(static_cast<uint64_t>(r) + static_cast<uint64_t>(x[k]));
            break;
          case v1::PRODUCT:
            r = static_cast<T>(static_cast<uint64_t>(r) * static_cast<uint64_t>(x[k]));
            break;
          case v1::MIN:
            r = std::min(r, x[k]);
            break;
          case v1::MAX:
            r = std::max(r, x[k]);
            break;
          default:
            break;
        }
      }
    }
    if (c.postscale != 1.0) r = refScaleInt(r, c.postscale);
    store<T>(out, i, r);
  }
  return out;
}

Bytes referenceBool(const Case& c, const std::vector<Bytes>& in) {
  Bytes out(c.count);
  for (size_t i = 0; i < c.count; ++i) {
    bool r = in[0][i] != 0;
    for (int k = 1; k < c.num_inputs; ++k) {
      r = c.op == v1::MIN ? (r && in[k][i] != 0) : (r || in[k][i] != 0);
    }
    out[i] = r ? 1 : 0;
  }
  return out;
}

Bytes reference(const Case& c, const std::vector<Bytes>& in) {
  auto same_f = [](float v) { return v; };
  auto same_d = [](double v) { return v; };
  switch (c.dtype) {
    case v1::FLOAT32:
      return referenceFloat<float, float>(c, in, same_f, same_f);
    case v1::FLOAT64:
      return referenceFloat<double, double>(c, in, same_d, same_d);
    case v1::FLOAT16:
      return referenceFloat<uint16_t, float>(c, in, halfToFloat, floatToHalf);
    case v1::BFLOAT16:
      return referenceFloat<uint16_t, float>(c, in, bfloat16ToFloat, floatToBfloat16);
    case v1::UINT8:
      return referenceInt<uint8_t>(c, in);
    case v1::INT8:
      return referenceInt<int8_t>(c, in);
    case v1::UINT16:
      return referenceInt<uint16_t>(c, in);
    case v1::INT16:
      return referenceInt<int16_t>(c, in);
    case v1::INT32:
      return referenceInt<int32_t>(c, in);
    case v1::INT64:
      return referenceInt<int64_t>(c, in);
    case v1::BOOL:
      return referenceBool(c, in);
    default:
      return {};
  }
}

// Whether element i is a NaN of a floating dtype.
bool isNanAt(DataType dtype, const Bytes& b, size_t i) {
  switch (dtype) {
    case v1::FLOAT32:
      return std::isnan(load<float>(b, i));
    case v1::FLOAT64:
      return std::isnan(load<double>(b, i));
    case v1::FLOAT16:
      return (load<uint16_t>(b, i) & 0x7fff) > 0x7c00;
    case v1::BFLOAT16:
      return (load<uint16_t>(b, i) & 0x7fff) > 0x7f80;
    default:
      return false;
  }
}

// "" when equal (bitwise, any NaN equal to any NaN), else the first mismatch.
std::string compare(DataType dtype, const Bytes& expected, const Bytes& actual) {
  const size_t size = elementSize(dtype);
  if (expected.size() != actual.size()) return "size differs";
  for (size_t i = 0; i < expected.size() / size; ++i) {
    if (std::memcmp(expected.data() + i * size, actual.data() + i * size, size) == 0) continue;
    if (isNanAt(dtype, expected, i) && isNanAt(dtype, actual, i)) continue;
    std::ostringstream s;
    s << "element " << i << ": expected 0x" << std::hex;
    for (size_t j = size; j-- > 0;) s << static_cast<int>(expected[i * size + j]);
    s << " got 0x";
    for (size_t j = size; j-- > 0;) s << static_cast<int>(actual[i * size + j]);
    return s.str();
  }
  return "";
}

// ---------------------------------------------------------------------------
// Input data: random values with some special values mixed in.

Bytes randomInput(DataType dtype, size_t count, std::mt19937& rng) {
  Bytes b(count * elementSize(dtype));
  std::uniform_real_distribution<double> real(-8.0, 8.0);
  std::uniform_int_distribution<int> pick(0, 99);
  std::uniform_int_distribution<uint64_t> bits;
  const float special_f[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3e38f, 1.0f};
  const double special_d[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-310, 1e308, 1.0};
  const uint16_t special_h[] = {0x7e00, 0x7c00, 0xfc00, 0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff};
  const uint16_t special_b[] = {0x7fc0, 0x7f80, 0xff80, 0x0000, 0x8000, 0x0001, 0x7f7f, 0xff7f};
  for (size_t i = 0; i < count; ++i) {
    const int p = pick(rng);
    const bool special = p < 8;  // 8% special values
    switch (dtype) {
      case v1::FLOAT32:
        store<float>(b, i, special ? special_f[p] : static_cast<float>(real(rng)));
        break;
      case v1::FLOAT64:
        store<double>(b, i, special ? special_d[p] : real(rng));
        break;
      case v1::FLOAT16:
        store<uint16_t>(b, i, special ? special_h[p] : floatToHalf(static_cast<float>(real(rng))));
        break;
      case v1::BFLOAT16:
        store<uint16_t>(b, i, special ? special_b[p] : floatToBfloat16(static_cast<float>(real(rng))));
        break;
      case v1::BOOL:
        b[i] = p < 50 ? 0 : static_cast<uint8_t>(1 + bits(rng) % 255);
        break;
      default: {  // integers: every bit pattern, to exercise wraparound
        const uint64_t v = bits(rng);
        std::memcpy(b.data() + i * elementSize(dtype), &v, elementSize(dtype));
        break;
      }
    }
  }
  return b;
}

enum class Alias {
  kSeparate,   // two separate outputs
  kAliasAll,   // one output per input, each the input itself (allreduce in place)
  kAliasLast,  // one output: the last input
};

// Runs one case in every aliasing mode, variant and split of the range, and
// checks every output (and that inputs that are not outputs are unchanged).
void checkCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Bytes> inputs;
  for (int k = 0; k < c.num_inputs; ++k) inputs.push_back(randomInput(c.dtype, c.count, rng));
  const Bytes expected = reference(c, inputs);
  ASSERT_EQ(expected.size(), c.count * elementSize(c.dtype));

  for (Alias alias : {Alias::kSeparate, Alias::kAliasAll, Alias::kAliasLast}) {
    for (Variant variant : variants()) {
      for (bool split : {false, true}) {
        SCOPED_TRACE(c.describe() + " alias=" + std::to_string(static_cast<int>(alias)) +
                     " variant=" + variantName(variant) + " split=" + std::to_string(split));
        std::vector<Bytes> in = inputs;
        std::vector<Bytes> separate(2, Bytes(expected.size(), 0xAB));
        std::vector<const void*> in_ptrs;
        for (Bytes& b : in) in_ptrs.push_back(b.data());
        std::vector<void*> out_ptrs;
        std::vector<bool> is_output(c.num_inputs, false);
        switch (alias) {
          case Alias::kSeparate:
            for (Bytes& b : separate) out_ptrs.push_back(b.data());
            break;
          case Alias::kAliasAll:
            for (int k = 0; k < c.num_inputs; ++k) {
              out_ptrs.push_back(in[k].data());
              is_output[k] = true;
            }
            break;
          case Alias::kAliasLast:
            out_ptrs.push_back(in[c.num_inputs - 1].data());
            is_output[c.num_inputs - 1] = true;
            break;
        }
        ReduceArgs args;
        args.dtype = c.dtype;
        args.op = c.op;
        args.inputs = in_ptrs.data();
        args.num_inputs = c.num_inputs;
        args.outputs = out_ptrs.data();
        args.num_outputs = static_cast<int>(out_ptrs.size());
        args.prescale = c.prescale;
        args.postscale = c.postscale;
        args.average_divisor = c.divisor;
        ASSERT_TRUE(validateReduceArgs(args).isOk()) << validateReduceArgs(args).toString();
        if (split) {
          // Three pieces that are not block aligned, done out of order.
          const size_t p1 = std::min(c.count, c.count / 3 + 1);
          const size_t p2 = std::min(c.count, std::max(p1, 2 * c.count / 3 + 5));
          runVariant(variant, args, p2, c.count);
          runVariant(variant, args, 0, p1);
          runVariant(variant, args, p1, p1);  // empty
          runVariant(variant, args, p1, p2);
        } else {
          runVariant(variant, args, 0, c.count);
        }
        for (size_t j = 0; j < out_ptrs.size(); ++j) {
          const Bytes actual(static_cast<uint8_t*>(out_ptrs[j]), static_cast<uint8_t*>(out_ptrs[j]) + expected.size());
          const std::string diff = compare(c.dtype, expected, actual);
          ASSERT_EQ(diff, "") << "output " << j;
        }
        for (int k = 0; k < c.num_inputs; ++k) {
          if (!is_output[k]) ASSERT_EQ(in[k], inputs[k]) << "input " << k << " was modified";
        }
      }
    }
  }
}

TEST(CpuReduceTest, EveryTypeAndOpMatchesReference) {
  uint32_t seed = 1;
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (!reduceOpAllowed(dtype, op)) continue;
      for (int ni : {1, 2, 3, 4}) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{2049}, size_t{10000}}) {
          Case c{dtype, op, ni, count};
          if (op == v1::AVERAGE) c.divisor = ni;
          checkCase(c, seed++);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CpuReduceTest, AverageWithDivisorLargerThanInputs) {
  uint32_t seed = 1000;
  for (DataType dtype : kAllTypes) {
    if (!reduceOpAllowed(dtype, v1::AVERAGE)) continue;
    for (int ni : {1, 2, 3}) {
      for (int divisor : {ni + 1, 7, 64}) {
        Case c{dtype, v1::AVERAGE, ni, 2049};
        c.divisor = divisor;
        checkCase(c, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// More inputs and outputs than the AVX2 streaming kernel takes at once.
TEST(CpuReduceTest, ManyInputsAndOutputs) {
  uint32_t seed = 3000;
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : {v1::SUM, v1::MAX, v1::AVERAGE}) {
      if (!reduceOpAllowed(dtype, op)) continue;
      for (int ni : {5, 9, 12}) {
        Case c{dtype, op, ni, 2049};
        c.divisor = ni;
        checkCase(c, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(CpuReduceTest, PrescaleAndPostscale) {
  const std::pair<double, double> scales[] = {{0.5, 3.0}, {-1.25, 0.1}, {1.0, 0.25}, {2.0, 1.0}, {1.0 / 3, -7.0}};
  uint32_t seed = 2000;
  for (DataType dtype : kAllTypes) {
    if (dtype == v1::BOOL) continue;
    for (ReduceOp op : kAllOps) {
      if (!reduceOpAllowed(dtype, op)) continue;
      for (auto [pre, post] : scales) {
        for (int ni : {1, 2, 3}) {
          for (size_t count : {size_t{7}, size_t{2049}}) {
            Case c{dtype, op, ni, count, pre, post};
            if (op == v1::AVERAGE) c.divisor = ni + 1;
            checkCase(c, seed++);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Hand-computed cases.

// Reduces the given inputs (one output, separate) with `variant`.
template <typename T>
std::vector<T> reduceVectors(Variant variant, DataType dtype, ReduceOp op, const std::vector<std::vector<T>>& in,
                             double pre = 1.0, double post = 1.0, int divisor = 1) {
  std::vector<T> out(in[0].size());
  std::vector<const void*> in_ptrs;
  for (const auto& v : in) in_ptrs.push_back(v.data());
  void* out_ptr = out.data();
  ReduceArgs args;
  args.dtype = dtype;
  args.op = op;
  args.inputs = in_ptrs.data();
  args.num_inputs = static_cast<int>(in.size());
  args.outputs = &out_ptr;
  args.num_outputs = 1;
  args.prescale = pre;
  args.postscale = post;
  args.average_divisor = divisor;
  EXPECT_TRUE(validateReduceArgs(args).isOk()) << validateReduceArgs(args).toString();
  runVariant(variant, args, 0, out.size());
  return out;
}

struct Pair16 {
  uint16_t a;
  uint16_t b;
  uint16_t sum;
};

// Checks a + b for every pair, each repeated to fill vector lanes and a tail.
void checkPairs16(DataType dtype, const std::vector<Pair16>& pairs) {
  const size_t reps = 37;
  std::vector<uint16_t> a, b;
  for (const Pair16& p : pairs) {
    for (size_t r = 0; r < reps; ++r) {
      a.push_back(p.a);
      b.push_back(p.b);
    }
  }
  for (Variant variant : variants()) {
    const std::vector<uint16_t> out = reduceVectors<uint16_t>(variant, dtype, v1::SUM, {a, b});
    for (size_t i = 0; i < out.size(); ++i) {
      const Pair16& p = pairs[i / reps];
      ASSERT_EQ(out[i], p.sum) << variantName(variant) << std::hex << " 0x" << p.a << " + 0x" << p.b;
    }
  }
}

TEST(CpuReduceTest, Float16Rounding) {
  checkPairs16(v1::FLOAT16, {
                                {0x3c00, 0x1000, 0x3c00},  // 1 + 2^-11: tie, to even
                                {0x3c01, 0x1000, 0x3c02},  // tie, to even (up)
                                {0x3c00, 0x1001, 0x3c01},  // just above the tie
                                {0x7bff, 0x7bff, 0x7c00},  // overflow to Inf
                                {0x7bff, 0x4c00, 0x7c00},  // 65504 + 16 = 65520: tie, to Inf
                                {0x7bff, 0x4800, 0x7bff},  // 65504 + 8 = 65512
                                {0xfbff, 0xfbff, 0xfc00},  // -Inf
                                {0x7c00, 0x3c00, 0x7c00},  // Inf + 1
                                {0x0001, 0x0001, 0x0002},  // denormals
                                {0x03ff, 0x0001, 0x0400},  // denormal to normal
                                {0x0400, 0x8001, 0x03ff},  // normal to denormal
                                {0x8001, 0x0001, 0x0000},  // x + -x = +0
                                {0x8000, 0x8000, 0x8000},  // -0 + -0 = -0
                                {0x8000, 0x0000, 0x0000},
                                {0x8001, 0x8001, 0x8002},
                            });
}

TEST(CpuReduceTest, Float16NanAndDenormalScaling) {
  for (Variant variant : variants()) {
    SCOPED_TRACE(variantName(variant));
    const std::vector<uint16_t> nan =
        reduceVectors<uint16_t>(variant, v1::FLOAT16, v1::SUM, {{0x7e00, 0x7c00, 0x3c00}, {0x3c00, 0xfc00, 0x7d00}});
    for (uint16_t h : nan) EXPECT_GT(h & 0x7fff, 0x7c00) << std::hex << h;
    // x * 0.5 in the denormal range: 0.5 ulp -> 0 (even), 1.5 -> 2, 2.5 -> 2, -0.5 -> -0.
    const std::vector<uint16_t> half =
        reduceVectors<uint16_t>(variant, v1::FLOAT16, v1::SUM, {{0x0001, 0x0003, 0x0005, 0x8001, 0x0400}}, 0.5);
    EXPECT_EQ(half, (std::vector<uint16_t>{0x0000, 0x0002, 0x0002, 0x8000, 0x0200}));
    const std::vector<uint16_t> avg = reduceVectors<uint16_t>(
        variant, v1::FLOAT16, v1::AVERAGE, {{0x3c00, 0x4000}, {0x3c00, 0x4000}, {0x3c00, 0x4000}}, 1.0, 1.0, 3);
    EXPECT_EQ(avg, (std::vector<uint16_t>{0x3c00, 0x4000}));
  }
}

TEST(CpuReduceTest, Bfloat16Rounding) {
  checkPairs16(v1::BFLOAT16, {
                                 {0x3f80, 0x3b80, 0x3f80},  // 1 + 2^-8: tie, to even
                                 {0x3f81, 0x3b80, 0x3f82},  // tie, to even (up)
                                 {0x3f80, 0x3b81, 0x3f81},  // just above the tie
                                 {0x7f7f, 0x7f7f, 0x7f80},  // overflow to Inf
                                 {0x7f7f, 0x7b00, 0x7f80},  // max + half ulp: tie, to Inf
                                 {0x7f7e, 0x7b00, 0x7f7e},  // tie, to even (down)
                                 {0x7f80, 0x3f80, 0x7f80},  // Inf + 1
                                 {0x8000, 0x8000, 0x8000},  // -0 + -0
                                 {0x8000, 0x0000, 0x0000},
                                 {0x0001, 0x0001, 0x0002},  // denormals
                             });
  for (Variant variant : variants()) {
    const std::vector<uint16_t> nan = reduceVectors<uint16_t>(
        variant, v1::BFLOAT16, v1::SUM, {{0x7fc1, 0x7f80, 0xffc0, 0x7f81}, {0x3f80, 0xff80, 0x3f80, 0x0000}});
    for (uint16_t b : nan) EXPECT_GT(b & 0x7fff, 0x7f80) << variantName(variant) << std::hex << " " << b;
    const std::vector<uint16_t> maxed = reduceVectors<uint16_t>(variant, v1::BFLOAT16, v1::MAX, {{0x7fc0}, {0x3f80}});
    EXPECT_GT(maxed[0] & 0x7fff, 0x7f80);
  }
}

TEST(CpuReduceTest, FloatMinMaxPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Variant variant : variants()) {
    for (ReduceOp op : {v1::MIN, v1::MAX}) {
      const std::vector<float> out =
          reduceVectors<float>(variant, v1::FLOAT32, op, {{nan, 1.0f, 2.0f, -3.0f}, {1.0f, nan, 1.0f, 5.0f}});
      EXPECT_TRUE(std::isnan(out[0]));
      EXPECT_TRUE(std::isnan(out[1]));
      EXPECT_EQ(out[2], op == v1::MIN ? 1.0f : 2.0f);
      EXPECT_EQ(out[3], op == v1::MIN ? -3.0f : 5.0f);
    }
  }
}

// "" when a and b are bitwise equal, except that NaN payloads may differ (which
// operand's NaN an addition returns depends on the operand order the compiler
// picked).
std::string firstDifference(DataType dtype, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                            const std::vector<uint16_t>& input) {
  const uint16_t inf = dtype == v1::FLOAT16 ? 0x7c00 : 0x7f80;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i] & 0x7fff) > inf && (b[i] & 0x7fff) > inf) continue;
    if (a[i] != b[i]) {
      std::ostringstream s;
      s << std::hex << "input 0x" << input[i] << ": 0x" << a[i] << " vs 0x" << b[i];
      return s.str();
    }
  }
  return "";
}

// The AVX2 (F16C) and baseline conversions agree bit for bit on every fp16 and
// bf16 input, with and without scaling.
TEST(CpuReduceTest, VariantsAgreeOnEvery16BitPattern) {
  if (!internal::cpuSupportsAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  for (size_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> shuffled = all;
  std::mt19937 rng(3);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  for (DataType dtype : {v1::FLOAT16, v1::BFLOAT16}) {
    for (double pre : {1.0, 0.5, 3.0, 1e-3, 1e5}) {
      const auto a = reduceVectors<uint16_t>(Variant::kBaseline, dtype, v1::SUM, {all}, pre);
      const auto b = reduceVectors<uint16_t>(Variant::kAvx2, dtype, v1::SUM, {all}, pre);
      ASSERT_EQ(firstDifference(dtype, a, b, all), "") << dataTypeName(dtype) << " pre " << pre;
      for (ReduceOp op : kAllOps) {
        const auto c = reduceVectors<uint16_t>(Variant::kBaseline, dtype, op, {all, shuffled}, pre, 0.75, 3);
        const auto d = reduceVectors<uint16_t>(Variant::kAvx2, dtype, op, {all, shuffled}, pre, 0.75, 3);
        ASSERT_EQ(firstDifference(dtype, c, d, all), "")
            << dataTypeName(dtype) << " " << reduceOpName(op) << " pre " << pre;
      }
    }
  }
  // Without scaling a single input comes back unchanged (NaN quieted).
  const auto same = reduceVectors<uint16_t>(Variant::kAvx2, v1::FLOAT16, v1::SUM, {all});
  for (size_t i = 0; i < all.size(); ++i) {
    if ((all[i] & 0x7fff) <= 0x7c00) ASSERT_EQ(same[i], all[i]);
  }
}

TEST(CpuReduceTest, IntegerWraparound) {
  for (Variant variant : variants()) {
    SCOPED_TRACE(variantName(variant));
    EXPECT_EQ(reduceVectors<int8_t>(variant, v1::INT8, v1::SUM, {{127, -128, 100}, {1, -1, 100}}),
              (std::vector<int8_t>{-128, 127, -56}));
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::UINT8, v1::SUM, {{255, 200}, {1, 100}}),
              (std::vector<uint8_t>{0, 44}));
    EXPECT_EQ(reduceVectors<int16_t>(variant, v1::INT16, v1::PRODUCT, {{300, -32768}, {300, -1}}),
              (std::vector<int16_t>{24464, -32768}));
    EXPECT_EQ(reduceVectors<uint16_t>(variant, v1::UINT16, v1::PRODUCT, {{65535, 256}, {65535, 256}}),
              (std::vector<uint16_t>{1, 0}));
    const int32_t imax = std::numeric_limits<int32_t>::max();
    EXPECT_EQ(reduceVectors<int32_t>(variant, v1::INT32, v1::SUM, {{imax}, {1}}),
              (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
    const int64_t lmax = std::numeric_limits<int64_t>::max();
    const int64_t lmin = std::numeric_limits<int64_t>::min();
    EXPECT_EQ(reduceVectors<int64_t>(variant, v1::INT64, v1::SUM, {{lmax, lmin}, {1, -1}}),
              (std::vector<int64_t>{lmin, lmax}));
    EXPECT_EQ(reduceVectors<int64_t>(variant, v1::INT64, v1::PRODUCT, {{lmin}, {-1}}), (std::vector<int64_t>{lmin}));
    EXPECT_EQ(reduceVectors<int8_t>(variant, v1::INT8, v1::MIN, {{-128, 5}, {127, -5}}),
              (std::vector<int8_t>{-128, -5}));
    EXPECT_EQ(reduceVectors<uint16_t>(variant, v1::UINT16, v1::MAX, {{65535, 5}, {0, 6}}),
              (std::vector<uint16_t>{65535, 6}));
  }
}

TEST(CpuReduceTest, IntegerAverageAndScaling) {
  for (Variant variant : variants()) {
    SCOPED_TRACE(variantName(variant));
    // Summed in 64 bits: no overflow of the 8-bit type on the way.
    EXPECT_EQ(reduceVectors<int8_t>(variant, v1::INT8, v1::AVERAGE, {{100, -7, -128}, {100, 0, -128}, {100, 0, -128}},
                                    1.0, 1.0, 3),
              (std::vector<int8_t>{100, -2, -128}));  // -7/3 truncates toward zero
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::UINT8, v1::AVERAGE, {{255}, {255}}, 1.0, 1.0, 4),
              (std::vector<uint8_t>{127}));
    // A divisor smaller than the number of inputs wraps into the type.
    EXPECT_EQ(reduceVectors<int8_t>(variant, v1::INT8, v1::AVERAGE, {{100}, {100}, {100}, {100}}, 1.0, 1.0, 2),
              (std::vector<int8_t>{-56}));
    const int64_t lmax = std::numeric_limits<int64_t>::max();
    EXPECT_EQ(reduceVectors<int64_t>(variant, v1::INT64, v1::AVERAGE, {{lmax, -9}, {lmax, 0}}, 1.0, 1.0, 5),
              (std::vector<int64_t>{0, -1}));  // the sum wraps at 2^64 to -2; / 5 truncates to 0
  }
}

TEST(CpuReduceTest, IntegerScalingTruncatesAndSaturates) {
  for (Variant variant : variants()) {
    SCOPED_TRACE(variantName(variant));
    // Truncated toward zero, as Horovod: 1.5 -> 1, 2.5 -> 2, -2.5 -> -2, 3.5 -> 3.
    EXPECT_EQ(reduceVectors<int32_t>(variant, v1::INT32, v1::SUM, {{3, 5, -5, 7}}, 0.5),
              (std::vector<int32_t>{1, 2, -2, 3}));
    EXPECT_EQ(reduceVectors<int8_t>(variant, v1::INT8, v1::SUM, {{100, -100, 10}}, 2.0),
              (std::vector<int8_t>{127, -128, 20}));
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::UINT8, v1::SUM, {{10, 200}}, 1.0, -1.0),
              (std::vector<uint8_t>{0, 0}));
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::UINT8, v1::SUM, {{10, 200}}, 1.0, std::nan("")),
              (std::vector<uint8_t>{0, 0}));
    const int64_t lmax = std::numeric_limits<int64_t>::max();
    const int64_t lmin = std::numeric_limits<int64_t>::min();
    EXPECT_EQ(reduceVectors<int64_t>(variant, v1::INT64, v1::MAX, {{lmax / 2 + 10, lmin / 2 - 10, 21}}, 1.0, 2.0),
              (std::vector<int64_t>{lmax, lmin, 42}));
    // Prescale applies to each input before summing (int16: 3*0.5 -> 1, twice).
    EXPECT_EQ(reduceVectors<int16_t>(variant, v1::INT16, v1::SUM, {{3}, {3}}, 0.5), (std::vector<int16_t>{2}));
  }
}

TEST(CpuReduceTest, BoolAndOr) {
  const std::vector<uint8_t> a = {0, 1, 2, 255, 0, 7};
  const std::vector<uint8_t> b = {0, 0, 255, 3, 9, 128};
  for (Variant variant : variants()) {
    SCOPED_TRACE(variantName(variant));
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::BOOL, v1::MIN, {a, b}), (std::vector<uint8_t>{0, 0, 1, 1, 0, 1}));
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::BOOL, v1::MAX, {a, b}), (std::vector<uint8_t>{0, 1, 1, 1, 1, 1}));
    EXPECT_EQ(reduceVectors<uint8_t>(variant, v1::BOOL, v1::MAX, {a}), (std::vector<uint8_t>{0, 1, 1, 1, 0, 1}));
  }
}

// ---------------------------------------------------------------------------
// Validation.

TEST(CpuReduceTest, Validation) {
  float x[4] = {};
  const void* in[2] = {x, x};
  void* out[1] = {x};
  ReduceArgs ok;
  ok.dtype = v1::FLOAT32;
  ok.op = v1::SUM;
  ok.inputs = in;
  ok.num_inputs = 2;
  ok.outputs = out;
  ok.num_outputs = 1;
  EXPECT_TRUE(validateReduceArgs(ok).isOk());

  auto expectInvalid = [](const ReduceArgs& args, const std::string& needle) {
    const Status s = validateReduceArgs(args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  ReduceArgs a = ok;
  a.dtype = v1::BOOL;
  expectInvalid(a, "dtype bool, op sum");
  a.op = v1::AVERAGE;
  expectInvalid(a, "op average");
  a.op = v1::PRODUCT;
  expectInvalid(a, "op product");
  a.op = v1::MIN;
  EXPECT_TRUE(validateReduceArgs(a).isOk());
  a.prescale = 2.0;
  expectInvalid(a, "prescale");

  a = ok;
  a.dtype = static_cast<DataType>(99);
  expectInvalid(a, "unknown(99)");
  a.dtype = v1::DATA_TYPE_UNSPECIFIED;
  expectInvalid(a, "dtype");
  a = ok;
  a.op = static_cast<ReduceOp>(42);
  expectInvalid(a, "unknown(42)");
  a.op = v1::REDUCE_OP_UNSPECIFIED;
  expectInvalid(a, "float32");

  a = ok;
  a.num_inputs = 0;
  expectInvalid(a, "num_inputs 0");
  a.num_inputs = -1;
  expectInvalid(a, "num_inputs");
  a = ok;
  a.inputs = nullptr;
  expectInvalid(a, "input");
  a = ok;
  a.num_outputs = 0;
  expectInvalid(a, "num_outputs 0");
  a = ok;
  a.outputs = nullptr;
  expectInvalid(a, "output");
  a = ok;
  const void* with_null[2] = {x, nullptr};
  a.inputs = with_null;
  expectInvalid(a, "input 1 is null");
  a = ok;
  a.op = v1::AVERAGE;
  a.average_divisor = 0;
  expectInvalid(a, "average_divisor");
  a.average_divisor = 3;
  EXPECT_TRUE(validateReduceArgs(a).isOk());
}

TEST(CpuReduceTest, EmptyRangeTouchesNothing) {
  float a[2] = {1.0f, 2.0f};
  float out[2] = {7.0f, 7.0f};
  const void* in[1] = {a};
  void* outs[1] = {out};
  ReduceArgs args;
  args.dtype = v1::FLOAT32;
  args.op = v1::SUM;
  args.inputs = in;
  args.num_inputs = 1;
  args.outputs = outs;
  args.num_outputs = 1;
  reduceRange(args, 1, 1);
  reduceRange(args, 2, 0);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], 7.0f);
}

}  // namespace
}  // namespace gradsync::reduce
