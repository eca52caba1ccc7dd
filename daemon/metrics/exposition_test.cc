// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/exposition.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace gradsync::metrics {
namespace {

TEST(Exposition, FamiliesKeepTheirSamplesTogetherInFirstUseOrder) {
  Exposition out;
  out.counter("gradsync_a_total", "A.", {{"job", "j1"}}, 1);
  out.gauge("gradsync_b", "B.", {{"job", "j1"}}, 2.5);
  out.counter("gradsync_a_total", "A.", {{"job", "j2"}}, 3);
  EXPECT_EQ(out.text(),
            "# HELP gradsync_a_total A.\n"
            "# TYPE gradsync_a_total counter\n"
            "gradsync_a_total{job=\"j1\"} 1\n"
            "gradsync_a_total{job=\"j2\"} 3\n"
            "# HELP gradsync_b B.\n"
            "# TYPE gradsync_b gauge\n"
            "gradsync_b{job=\"j1\"} 2.5\n");
}

TEST(Exposition, LabelValuesAndHelpAreEscaped) {
  Exposition out;
  out.gauge("gradsync_x", "back\\slash\nnewline", {{"job", "a\"b\\c\nd"}}, 0);
  EXPECT_EQ(out.text(),
            "# HELP gradsync_x back\\\\slash\\nnewline\n"
            "# TYPE gradsync_x gauge\n"
            "gradsync_x{job=\"a\\\"b\\\\c\\nd\"} 0\n");
}

TEST(Exposition, ValuesRoundTripAndSpecialValuesAreSpelledOut) {
  EXPECT_EQ(formatValue(0.1), "0.1");
  EXPECT_EQ(formatValue(1e-05), "1e-05");
  EXPECT_EQ(formatValue(1e-04), "0.0001");
  EXPECT_EQ(formatValue(2.5e9), "2500000000");
  EXPECT_EQ(formatValue(-3.0), "-3");
  EXPECT_EQ(formatValue(1e300), "1e+300");
  EXPECT_EQ(formatValue(123456789012.0), "123456789012");
  EXPECT_EQ(formatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(formatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(formatValue(std::nan("")), "NaN");
}

TEST(Exposition, HistogramBucketsAreCumulativeWithAnInfBucket) {
  v1::Histogram h;
  h.add_upper_bounds(0.001);
  h.add_upper_bounds(0.01);
  h.add_counts(2);
  h.add_counts(3);
  h.add_counts(1);
  h.set_count(6);
  h.set_sum(0.5);
  Exposition out;
  out.histogram("gradsync_latency_seconds", "L.", {{"job", "j"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP gradsync_latency_seconds L.\n"
            "# TYPE gradsync_latency_seconds histogram\n"
            "gradsync_latency_seconds_bucket{job=\"j\",le=\"0.001\"} 2\n"
            "gradsync_latency_seconds_bucket{job=\"j\",le=\"0.01\"} 5\n"
            "gradsync_latency_seconds_bucket{job=\"j\",le=\"+Inf\"} 6\n"
            "gradsync_latency_seconds_sum{job=\"j\"} 0.5\n"
            "gradsync_latency_seconds_count{job=\"j\"} 6\n");
}

TEST(Exposition, AnEmptyHistogramStillHasItsInfBucket) {
  Exposition out;
  out.histogram("gradsync_h_bytes", "H.", {}, v1::Histogram());
  EXPECT_NE(out.text().find("gradsync_h_bytes_bucket{le=\"+Inf\"} 0\n"), std::string::npos) << out.text();
}

}  // namespace
}  // namespace gradsync::metrics
