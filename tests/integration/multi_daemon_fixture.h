// SPDX-License-Identifier: Apache-2.0
// A test fixture of several gradsyncd on this machine (separate sockets,
// peer services on loopback), daemon 0 leading the jobs launched on them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {

class MultiDaemonTest : public ::testing::Test {
 protected:
  void startDaemons(int count, std::vector<std::string> extra = {}) {
    daemons_.resize(count);
    std::vector<std::string> flags = {"--peer-address", "127.0.0.1:0", "--join-timeout-seconds", "10"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    for (auto& d : daemons_) {
      d = std::make_unique<DaemonFixture>();
      std::string error;
      ASSERT_TRUE(d->start(flags, &error)) << error;
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

  std::vector<std::unique_ptr<DaemonFixture>> daemons_;
  std::string leader_;
};

}  // namespace gradsync::testutil
