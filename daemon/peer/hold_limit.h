// SPDX-License-Identifier: Apache-2.0
// How long a request held for the steady state's rounds (RoundExchange)
// waits before it goes to the leader's negotiation instead: another node's
// rank may never submit it that way (it joined, or its metadata differs).
// Pure state; its owner updates it after each round it took part in.
#pragma once

#include <algorithm>
#include <chrono>

namespace gradsync::peer {

class HoldLimit {
 public:
  using Clock = std::chrono::steady_clock;
  // Ranks of a training job drift tens of milliseconds apart on busy CPUs:
  // at 20 ms most gradients went to the leader after waiting, and a
  // ResNet-18 step across two daemons took 315-321 ms against 292-296 ms
  // through the leader alone; at 200 ms, 290-296 ms.
  static constexpr Clock::duration kFloor = std::chrono::milliseconds(200);
  // When rounds take longer (hundreds of daemons through the leader on a
  // busy machine: 150-250 ms a round at 1,024), a request waits this many
  // of the slowest recent rounds: one that just missed a round is offered
  // in the next, and must not leave for the leader meanwhile, where the
  // others' requests never come while their rounds go on. Capped well
  // below the stall deadline.
  static constexpr int kRounds = 3;
  static constexpr Clock::duration kCap = std::chrono::seconds(10);

  // A round took `took` (decaying from the slowest by 1/8 a round).
  void roundTook(Clock::duration took) { slowest_ = std::max(took, slowest_ - slowest_ / 8); }
  Clock::duration limit() const { return std::clamp(kRounds * slowest_, kFloor, kCap); }

 private:
  Clock::duration slowest_{};
};

}  // namespace gradsync::peer
