// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/reduce/adasum.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::reduce {
namespace {

using ::testing::HasSubstr;

std::vector<double> pair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = (1 - dot / (2 * aa)) * a[i] + (1 - dot / (2 * bb)) * b[i];
  return out;
}

std::vector<double> run(std::vector<std::vector<double>> inputs, double pre = 1, double post = 1) {
  std::vector<uint8_t*> in;  // overwritten: these are copies
  for (auto& v : inputs) in.push_back(reinterpret_cast<uint8_t*>(v.data()));
  std::vector<double> out(inputs[0].size());
  EXPECT_TRUE(adasum(in, out.size(), v1::FLOAT64, pre, post, {reinterpret_cast<uint8_t*>(out.data())}).isOk());
  return out;
}

TEST(AdasumTest, OrthogonalVectorsAddAndEqualOnesAverage) {
  EXPECT_EQ(run({{1, 0}, {0, 2}}), (std::vector<double>{1, 2}));    // a.b = 0: a + b
  EXPECT_EQ(run({{3, 4}, {3, 4}}), (std::vector<double>{3, 4}));    // equal: (1/2)a + (1/2)b
  EXPECT_EQ(run({{2, 2}, {-2, -2}}), (std::vector<double>{0, 0}));  // opposite: (3/2)a + (3/2)b
  EXPECT_EQ(run({{0, 0}, {5, 1}}), (std::vector<double>{5, 1}));    // a zero norm keeps its coefficient 1
}

TEST(AdasumTest, FourRanksCombineAsATreeInRankOrder) {
  const std::vector<std::vector<double>> v = {{1, 2, 0}, {0.5, -1, 3}, {2, 2, 2}, {-1, 0, 4}};
  const auto expected = pair(pair(v[0], v[1]), pair(v[2], v[3]));
  const auto got = run(v);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-12);
  const auto scaled = run(v, 2.0, 0.25);  // Adasum is scale-equivariant: 2x in, 1/4 out
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(scaled[i], expected[i] * 0.5, 1e-12);
}

TEST(AdasumTest, EightRanksInPlaceAndPostscaleOnTheResultArrayLast) {
  std::vector<std::vector<double>> v(8, std::vector<double>(5));
  for (int r = 0; r < 8; ++r) {
    for (int i = 0; i < 5; ++i) v[r][i] = std::sin(r * 5 + i + 1.0);
  }
  auto expected = pair(pair(pair(v[0], v[1]), pair(v[2], v[3])), pair(pair(v[4], v[5]), pair(v[6], v[7])));
  std::vector<uint8_t*> work;
  for (auto& x : v) work.push_back(reinterpret_cast<uint8_t*>(x.data()));
  ASSERT_TRUE(adasum(work, 5, v1::FLOAT64, 1, 3.0, work).isOk());  // every rank's array gets the result
  for (int r = 0; r < 8; ++r) {
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(v[r][i], 3.0 * expected[i], 1e-12) << r << "," << i;
  }
}

TEST(AdasumTest, Float32InputsAndInPlaceOutputs) {
  std::vector<float> a = {1, 0, 0, 2}, b = {1, 1, 0, 0};
  ASSERT_TRUE(adasum({reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data())}, 4, v1::FLOAT32, 1, 1,
                     {reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data())})
                  .isOk());
  const auto expected = pair({1, 0, 0, 2}, {1, 1, 0, 0});
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(a[i], static_cast<float>(expected[i]));
    EXPECT_EQ(a[i], b[i]);
  }
}

TEST(AdasumTest, RefusesOtherRankCountsAndDtypes) {
  std::vector<double> x(2);
  auto* p = reinterpret_cast<uint8_t*>(x.data());
  EXPECT_THAT(adasum({p, p, p}, 2, v1::FLOAT64, 1, 1, {}).message(), HasSubstr("power-of-two"));
  EXPECT_THAT(adasum({p, p}, 2, v1::INT32, 1, 1, {}).message(), HasSubstr("floating-point"));
}

}  // namespace
}  // namespace gradsync::reduce
