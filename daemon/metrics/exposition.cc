// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/exposition.h"

#include <charconv>
#include <cmath>

namespace gradsync::metrics {

std::string formatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip digits; plain decimals unless the exponent is below
  // -4 or at least 21 (as Go's client writes them: 0.0001, 1e-05, 2500000000).
  const int exponent = value == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(value))));
  const auto format = exponent < -4 || exponent >= 21 ? std::chars_format::scientific : std::chars_format::fixed;
  char buffer[400];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, format);
  return std::string(buffer, result.ptr);
}

std::string escapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {
// HELP text escapes only backslash and newline.
std::string escapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

Exposition::Family& Exposition::family(const std::string& name, const char* type, const std::string& help) {
  auto [it, added] = families_.try_emplace(name);
  if (added) {
    order_.push_back(name);
    it->second.type = type;
    it->second.help = help;
  }
  return it->second;
}

void Exposition::sample(Family* family, const std::string& name, const Labels& labels, double value) {
  std::string& out = family->samples;
  out += name;
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out += ',';
      out += labels[i].first + "=\"" + escapeLabelValue(labels[i].second) + '"';
    }
    out += '}';
  }
  out += ' ' + formatValue(value) + '\n';
}

void Exposition::counter(const std::string& name, const std::string& help, const Labels& labels, double value) {
  sample(&family(name, "counter", help), name, labels, value);
}

void Exposition::gauge(const std::string& name, const std::string& help, const Labels& labels, double value) {
  sample(&family(name, "gauge", help), name, labels, value);
}

void Exposition::histogram(const std::string& name, const std::string& help, const Labels& labels,
                           const v1::Histogram& histogram) {
  Family* f = &family(name, "histogram", help);
  uint64_t cumulative = 0;
  for (int i = 0; i < histogram.counts_size(); ++i) {
    cumulative += histogram.counts(i);
    Labels with_le = labels;
    const bool last = i >= histogram.upper_bounds_size();
    with_le.emplace_back("le", last ? "+Inf" : formatValue(histogram.upper_bounds(i)));
    sample(f, name + "_bucket", with_le, static_cast<double>(cumulative));
  }
  if (histogram.counts_size() == 0) {  // never observed: the +Inf bucket alone
    Labels with_le = labels;
    with_le.emplace_back("le", "+Inf");
    sample(f, name + "_bucket", with_le, static_cast<double>(histogram.count()));
  }
  sample(f, name + "_sum", labels, histogram.sum());
  sample(f, name + "_count", labels, static_cast<double>(histogram.count()));
}

std::string Exposition::text() const {
  std::string out;
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    out += "# HELP " + name + ' ' + escapeHelp(f.help) + '\n';
    out += "# TYPE " + name + ' ' + f.type + '\n';
    out += f.samples;
  }
  return out;
}

}  // namespace gradsync::metrics
