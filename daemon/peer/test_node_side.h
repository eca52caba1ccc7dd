// SPDX-License-Identifier: Apache-2.0
// A NodeSide for tests: a follower's place in the book, nothing sent, every
// majority kept. Tests override what they record.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/peer/node_side.h"

namespace gradsync::peer::testing {

class QuietSide : public NodeSide {
 public:
  bool leads() const override { return false; }
  int crossRank(const membership::EpochBook& book) const override { return book.selfCrossRank(); }
  void tick(CrossClock::time_point, bool, bool) override {}
  void tell(const std::string&, bool, const Follower*, FailureNotices::Route) override {}
  void heard(const v1::JobFailure&, const Follower*) override {}
  void relayAbort(const v1::JobFailure&) override {}
  void sendRound(const v1::RoundMessage&, const std::vector<int>*) override {}
  int64_t heardAgeMs(const v1::NodeInfo&, int64_t) const override { return -1; }
  Status majority(const std::string&, CrossClock::time_point, size_t) const override { return okStatus(); }
  std::unique_ptr<LeaderRounds> makeRounds(size_t, LeaderRounds::Send, LeaderRounds::Idle) const override {
    return nullptr;
  }
};

}  // namespace gradsync::peer::testing
