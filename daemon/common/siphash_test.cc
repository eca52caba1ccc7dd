// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/siphash.h"

#include <vector>

#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(SipHashTest, MatchesTheReferenceVectors) {
  // The paper's key 00 01 .. 0f and messages 00 01 .. (n-1), n = 0, 1, 7, 8, 15.
  const SipKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  std::vector<uint8_t> message(16);
  for (int i = 0; i < 16; ++i) message[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(sipHash24(key, message.data(), 0), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(sipHash24(key, message.data(), 1), 0x74f839c593dc67fdull);
  EXPECT_EQ(sipHash24(key, message.data(), 7), 0xab0200f58b01d137ull);
  EXPECT_EQ(sipHash24(key, message.data(), 8), 0x93f5f5799a932462ull);
  EXPECT_EQ(sipHash24(key, message.data(), 15), 0xa129ca6149be45e5ull);
}

TEST(SipHashTest, DerivedKeysDependOnSecretAndPurpose) {
  const SipKey a = deriveSipKey("token", "tags"), b = deriveSipKey("token2", "tags"), c = deriveSipKey("token", "x");
  EXPECT_NE(a.k0, b.k0);
  EXPECT_NE(a.k0, c.k0);
  EXPECT_EQ(a.k1, deriveSipKey("token", "tags").k1);
}

}  // namespace
}  // namespace gradsync
