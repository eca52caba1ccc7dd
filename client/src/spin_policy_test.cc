// SPDX-License-Identifier: Apache-2.0
#include "client/src/spin_policy.h"

#include <gtest/gtest.h>

namespace gradsync::client {
namespace {

using std::chrono::microseconds;

TEST(SpinPolicy, SpinsWhileSpinsPay) {
  SpinPolicy policy(microseconds(50));
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(policy.next(), microseconds(50)) << "wait " << i;
    policy.record(microseconds(50), microseconds(10));
  }
}

TEST(SpinPolicy, StopsAfterMissesAndProbesNowAndThen) {
  SpinPolicy policy(microseconds(50));
  for (int i = 0; i < SpinPolicy::kMissLimit; ++i) {
    ASSERT_EQ(policy.next(), microseconds(50));
    policy.record(microseconds(50), microseconds(200));
  }
  int spins = 0;
  for (uint64_t i = 0; i < 10 * SpinPolicy::kProbeEvery; ++i) {
    const microseconds spin = policy.next();
    if (spin.count() > 0) ++spins;
    policy.record(spin, microseconds(200));
  }
  EXPECT_EQ(spins, 10);  // one probe in every kProbeEvery waits
}

TEST(SpinPolicy, AProbeThatPaysResumesSpinning) {
  SpinPolicy policy(microseconds(50));
  for (int i = 0; i < SpinPolicy::kMissLimit; ++i) policy.record(policy.next(), microseconds(200));
  microseconds spin(0);
  while (spin.count() == 0) spin = policy.next();
  policy.record(spin, microseconds(5));
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(policy.next(), microseconds(50));
    policy.record(microseconds(50), microseconds(5));
  }
}

TEST(SpinPolicy, ZeroNeverSpins) {
  SpinPolicy policy(microseconds(0));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(policy.next(), microseconds(0));
}

}  // namespace
}  // namespace gradsync::client
