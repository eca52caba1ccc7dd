// SPDX-License-Identifier: Apache-2.0
#include "base/fast_copy.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(FastCopyTest, CopiesEveryByteForAllSizesAndAlignments) {
  std::vector<uint8_t> src((3 << 20) + 300), dst(src.size() + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{127}, size_t{1} << 20, (size_t{1} << 20) + 77, size_t{3} << 20}) {
    for (size_t offset : {0, 1, 31, 33}) {
      std::fill(dst.begin(), dst.end(), 0xEE);
      fastCopy(dst.data() + offset, src.data() + (offset % 7), bytes);
      for (size_t i = 0; i < bytes; ++i)
        ASSERT_EQ(dst[offset + i], src[(offset % 7) + i]) << bytes << " " << offset << " " << i;
      ASSERT_EQ(dst[offset + bytes], 0xEE) << "wrote past the end";
      if (offset > 0) ASSERT_EQ(dst[offset - 1], 0xEE) << "wrote before the start";
    }
  }
}

}  // namespace
}  // namespace gradsync
