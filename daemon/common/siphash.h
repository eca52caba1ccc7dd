// SPDX-License-Identifier: Apache-2.0
// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudorandom function
// of 64-bit output. Used where an outsider must not predict or forge values
// (the data plane's message tags), not for integrity of the data itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gradsync {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;
};

uint64_t sipHash24(const SipKey& key, const void* data, size_t bytes);

// A key derived from `secret` (any length) and a `purpose` label.
SipKey deriveSipKey(const std::string& secret, const std::string& purpose);

// Whether two secrets (job tokens) are equal, in a time that does not
// depend on where they first differ (only on their length).
bool constantTimeEqual(const std::string& a, const std::string& b);

}  // namespace gradsync
