// SPDX-License-Identifier: Apache-2.0
#include "base/fast_copy.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace gradsync {
namespace {

// Below this, the data likely stays in cache and memcpy is as fast.
constexpr size_t kStreamingBytes = 1 << 20;

__attribute__((target("avx2"))) void streamCopy(uint8_t* d, const uint8_t* s, size_t n) {
  const size_t head = std::min(n, (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  _mm_sfence();
  std::memcpy(d + i, s + i, n - i);
}

bool hasAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

}  // namespace

void fastCopy(void* dst, const void* src, size_t bytes) {
  if (bytes < kStreamingBytes || !hasAvx2()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  streamCopy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes);
}

}  // namespace gradsync
