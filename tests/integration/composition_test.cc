// SPDX-License-Identifier: Apache-2.0
// Features together: collectives of several kinds in flight at once, some
// on a process set that leaves whole daemons out and some on the whole job,
// each rank submitting in an order of its own (worker scenario `composed`),
// across 3 to 5 daemons, in both steady-state modes. Every result is
// checked by the ranks themselves.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/multi_daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr auto kTimeout = std::chrono::seconds(150);

struct Composition {
  const char* name;
  int daemons;
  int ranks_per_daemon;
  const char* set;           // the process set's ranks
  const char* steady_state;  // --steady-state
  int steps;
};

// Rank r on daemon r % daemons: ranks of one daemon are not neighbours.
std::vector<int> placement(const Composition& c) {
  std::vector<int> where;
  for (int r = 0; r < c.daemons * c.ranks_per_daemon; ++r) where.push_back(r % c.daemons);
  return where;
}

class CompositionTest : public MultiDaemonTest, public ::testing::WithParamInterface<Composition> {};

TEST_P(CompositionTest, MixedCollectivesOnASetAndTheJobInFlightTogether) {
  const Composition& c = GetParam();
  startDaemons(c.daemons, {"--steady-state", c.steady_state});
  for (uint64_t seed : {1, 2, 3}) {
    const std::string job = std::string(c.name) + "-" + std::to_string(seed);
    auto ranks = launchWith(job, {"composed", std::to_string(seed), std::to_string(c.steps), c.set}, placement(c), {});
    std::string report;
    ASSERT_TRUE(allSucceed(ranks, kTimeout, &report)) << "seed " << seed << report << logs();
    for (auto& rank : ranks) {
      const std::string log = rank.log();
      const auto ok = log.find("COMPOSED OK");
      ASSERT_NE(ok, std::string::npos) << log;
      std::printf("%s seed %llu: %s", c.name, static_cast<unsigned long long>(seed),
                  log.substr(log.rfind(']', ok) + 2, log.find('\n', ok) - log.rfind(']', ok) - 1).c_str());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Compositions, CompositionTest,
                         ::testing::Values(
                             // The set leaves daemon 2 out (the last), daemon 0 (the leader's),
                             // daemon 1 (in the middle of the ring).
                             Composition{"three-set01-rounds", 3, 1, "0,1", "rounds", 8},
                             Composition{"three-set01-leader", 3, 1, "0,1", "leader", 8},
                             Composition{"three-set12-rounds", 3, 1, "1,2", "rounds", 8},
                             Composition{"three-set02-leader", 3, 1, "0,2", "leader", 8},
                             // Two ranks a daemon: daemon 2 holds ranks 2 and 5, outside {0, 1, 3, 4}.
                             Composition{"three-by-two-rounds", 3, 2, "0,1,3,4", "rounds", 6},
                             Composition{"four-set01-rounds", 4, 1, "0,1", "rounds", 6},
                             Composition{"five-set13-leader", 5, 1, "1,3", "leader", 6}),
                         [](const ::testing::TestParamInfo<Composition>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace gradsync::testutil
