// SPDX-License-Identifier: Apache-2.0
// Prometheus' text exposition format (version 0.0.4): families of samples,
// each family's HELP and TYPE once and its samples together, label values
// escaped. Families come out in the order they were first used.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Exposition {
 public:
  // `name` follows Prometheus' conventions: a gradsync_ prefix, base units
  // (seconds, bytes), and _total for counters.
  void counter(const std::string& name, const std::string& help, const Labels& labels, double value);
  void gauge(const std::string& name, const std::string& help, const Labels& labels, double value);
  // _bucket (cumulative, le), _sum and _count samples of `histogram`.
  void histogram(const std::string& name, const std::string& help, const Labels& labels,
                 const v1::Histogram& histogram);

  std::string text() const;

 private:
  struct Family {
    std::string type;
    std::string help;
    std::string samples;
  };
  Family& family(const std::string& name, const char* type, const std::string& help);
  static void sample(Family* family, const std::string& name, const Labels& labels, double value);

  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

// A sample value as the format writes it: the shortest decimal that reads
// back the same (0.0001, 1e-05, 2500000000), "+Inf", "-Inf" or "NaN".
std::string formatValue(double value);
// A label value with \, " and newline escaped.
std::string escapeLabelValue(const std::string& value);

}  // namespace gradsync::metrics
