// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/siphash.h"

#include <cstring>

namespace gradsync {
namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline void sipRound(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1;
  v1 = rotl(v1, 13);
  v1 ^= v0;
  v0 = rotl(v0, 32);
  v2 += v3;
  v3 = rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = rotl(v1, 17);
  v1 ^= v2;
  v2 = rotl(v2, 32);
}

}  // namespace

uint64_t sipHash24(const SipKey& key, const void* data, size_t bytes) {
  uint64_t v0 = 0x736f6d6570736575ull ^ key.k0, v1 = 0x646f72616e646f6dull ^ key.k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ key.k0, v3 = 0x7465646279746573ull ^ key.k1;
  const auto* in = static_cast<const uint8_t*>(data);
  const size_t full = bytes - bytes % 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m;
    std::memcpy(&m, in + i, 8);  // little-endian hosts only (x86-64, aarch64)
    v3 ^= m;
    sipRound(v0, v1, v2, v3);
    sipRound(v0, v1, v2, v3);
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(bytes) << 56;
  for (size_t i = 0; i < bytes % 8; ++i) last |= static_cast<uint64_t>(in[full + i]) << (8 * i);
  v3 ^= last;
  sipRound(v0, v1, v2, v3);
  sipRound(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) sipRound(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

SipKey deriveSipKey(const std::string& secret, const std::string& purpose) {
  const std::string input = purpose + '\0' + secret;
  return {sipHash24(SipKey{0x6772616473796e63ull, 1}, input.data(), input.size()),
          sipHash24(SipKey{0x6772616473796e63ull, 2}, input.data(), input.size())};
}

bool constantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;  // every byte compared, whatever the first difference
  for (size_t i = 0; i < a.size(); ++i) diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace gradsync
