// SPDX-License-Identifier: Apache-2.0
// A test fixture of several gradsyncd on this machine (separate sockets,
// peer services on loopback), daemon 0 leading the jobs launched on them.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {

class MultiDaemonTest : public ::testing::Test {
 protected:
  // `count` daemons with the flags `extra`, and daemon i with
  // `each(i)`'s too (where given).
  void startDaemons(int count, std::vector<std::string> extra = {},
                    const std::function<std::vector<std::string>(int)>& each = nullptr) {
    daemons_.resize(count);
    std::vector<std::string> flags = {"--peer-address", "127.0.0.1:0", "--join-timeout-seconds", "10"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    for (int i = 0; i < count; ++i) {
      auto& d = daemons_[i];
      d = std::make_unique<DaemonFixture>();
      std::vector<std::string> own = flags;
      if (each) {
        const auto more = each(i);
        own.insert(own.end(), more.begin(), more.end());
      }
      std::string error;
      ASSERT_TRUE(d->start(own, &error)) << error;
    }
    leader_ = daemons_[0]->peerAddress();
    ASSERT_FALSE(leader_.empty()) << daemons_[0]->log();
  }
  // Starts `scenario` with ranks placed on daemons by `placement[rank]`.
  std::vector<Process> launch(const std::string& job, const std::string& scenario, const std::vector<int>& placement) {
    return launchWith(job, {scenario}, placement, {});
  }
  // The same with the worker's arguments and more environment.
  std::vector<Process> launchWith(const std::string& job, const std::vector<std::string>& args,
                                  const std::vector<int>& placement, const std::map<std::string, std::string>& env) {
    std::vector<const DaemonFixture*> daemons;
    for (const auto& d : daemons_) daemons.push_back(d.get());
    return launchAcross(daemons, job, args, placement, {}, env);
  }
  std::string logs() const {
    std::string all;
    for (size_t i = 0; i < daemons_.size(); ++i) all += "--- daemon " + std::to_string(i) + ":\n" + daemons_[i]->log();
    return all;
  }

  // Kills daemon `victim` with SIGKILL and waits up to 15 s for `survivor`
  // to exit; returns its exit code and the seconds it took.
  std::pair<int, double> killDaemonAndWait(int victim, Process& survivor) {
    const auto killed_at = std::chrono::steady_clock::now();
    daemons_[victim]->process().kill(SIGKILL);
    const int code = survivor.wait(std::chrono::seconds(15));
    return {code, std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count()};
  }

  // A `kill_victim cached` job of two ranks placed by `placement`: once rank
  // 0's repeat of a cached step is held, kills daemon `victim` and expects
  // rank 0 to fail that step (exit 0) within 10 s. Returns rank 0's log, or
  // nullopt (a failure recorded) when the step was never held.
  std::optional<std::string> killDaemonUnderAHeldStep(const std::string& job, const std::vector<int>& placement,
                                                      int victim) {
    auto ranks = launchWith(job, {"kill_victim", "cached"}, placement, {});
    if (!waitFor([&] { return ranks[0].log().find("ENQUEUED") != std::string::npos; }, std::chrono::seconds(30))) {
      ADD_FAILURE() << ranks[0].log() << logs();
      return std::nullopt;
    }
    const auto [code, seconds] = killDaemonAndWait(victim, ranks[0]);
    EXPECT_EQ(code, 0) << ranks[0].log() << logs();
    EXPECT_LT(seconds, scaled(10.0));
    return ranks[0].log();
  }

  // The counters the leader logs when `job` ends (waits up to 10 s for the
  // line; `log` gets the leader's log either way).
  struct EndLine {
    int operations = 0;
    int cache_hits = 0;
  };
  std::optional<EndLine> leaderEndLine(const std::string& job, std::string* log) const {
    std::smatch match;
    const std::regex line("job '" + job + "' ended: ([0-9]+) operations.* ([0-9]+) response-cache hits");
    if (!waitFor(
            [&] {
              *log = daemons_[0]->log();
              return std::regex_search(*log, match, line);
            },
            std::chrono::seconds(10))) {
      return std::nullopt;
    }
    return EndLine{std::stoi(match[1].str()), std::stoi(match[2].str())};
  }

  std::vector<std::unique_ptr<DaemonFixture>> daemons_;
  std::string leader_;
};

}  // namespace gradsync::testutil
