// SPDX-License-Identifier: Apache-2.0
// Elastic jobs spanning the daemons of a MultiDaemonTest: the ranks run the
// worker's elastic_loop scenario (tests/integration/worker_elastic.cc).
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/multi_daemon_fixture.h"

namespace gradsync::testutil {

inline constexpr auto kTimeout = std::chrono::seconds(90);
inline const std::map<std::string, std::string> kElastic = {{"GRADSYNC_ELASTIC", "1"}, {"GRADSYNC_MIN_SIZE", "2"}};

inline int64_t unixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline bool saysLooping(Process& p) { return p.log().find("LOOPING") != std::string::npos; }

// Whether every rank says it is looping within 30 s.
inline bool allLooping(std::vector<Process>& ranks) {
  return waitFor([&] { return std::all_of(ranks.begin(), ranks.end(), saysLooping); }, std::chrono::seconds(30));
}

// "RECOVERED epoch E at MS": MS for `epoch`, or -1.
inline int64_t recoveredAt(const std::string& log, int epoch) {
  std::smatch m;
  const std::regex pattern("RECOVERED epoch " + std::to_string(epoch) + " at ([0-9]+) size ([0-9]+)");
  return std::regex_search(log, m, pattern) ? std::stoll(m[1]) : -1;
}

class ElasticAcrossDaemonsTest : public MultiDaemonTest {
 protected:
  // A new rank of `job` (started with `size` ranks) that registers with
  // daemon `daemon` to join it (GRADSYNC_ELASTIC_JOIN), running the worker
  // with `args`.
  Process spawnJoiner(int daemon, const std::string& job, int size, const std::vector<std::string>& args,
                      std::map<std::string, std::string> env = kElastic) {
    env["GRADSYNC_ELASTIC_JOIN"] = "1";
    env["GRADSYNC_LEADER"] = daemons_[0]->peerAddress();
    env["GRADSYNC_LOCAL_RANK"] = "0";
    env["GRADSYNC_LOCAL_SIZE"] = "1";
    return daemons_[daemon]->spawnRank(job, 0, size, args, env);
  }
  // Kills the daemon `victim` and its ranks (SIGKILL) once every rank is
  // looping; returns when it was killed (Unix ms).
  int64_t killDaemonWhenLooping(std::vector<Process>& ranks, const std::vector<int>& placement, int victim) {
    EXPECT_TRUE(allLooping(ranks)) << logs();
    const int64_t at = unixMs();
    daemons_[victim]->process().kill(SIGKILL);
    for (size_t r = 0; r < placement.size(); ++r) {
      if (placement[r] == victim) ranks[r].kill(SIGKILL);
    }
    return at;
  }
  // The survivors (ranks not on `victim`) finish; returns the recovery time
  // of the first (ms from `killed_at` to its first collective of epoch 2).
  int64_t survivorsFinish(std::vector<Process>& ranks, const std::vector<int>& placement, int victim,
                          int64_t killed_at) {
    int64_t recovered = -1;
    for (size_t r = 0; r < placement.size(); ++r) {
      if (placement[r] == victim) continue;
      EXPECT_EQ(ranks[r].wait(kTimeout), 0) << "rank " << r << ":\n" << ranks[r].log() << logs();
      EXPECT_NE(ranks[r].log().find("size 2"), std::string::npos) << ranks[r].log();
      if (recovered < 0) recovered = recoveredAt(ranks[r].log(), 2);
    }
    EXPECT_GT(recovered, 0) << logs();
    return recovered - killed_at;
  }
};

}  // namespace gradsync::testutil
