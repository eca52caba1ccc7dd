// SPDX-License-Identifier: Apache-2.0
// The randomized differential check: from each seed, a setup (2 to 5
// daemons, 1 to 3 ranks on each, placed at random, one or two process sets
// that may leave whole daemons out, either steady-state mode, with or
// without one fault) and a random program of collectives (the worker's
// `random`). Without a fault every rank must get every result right; with
// one, every surviving rank must get an error naming the cause within the
// limit, and every surviving daemon must exit cleanly.
//
// Seeds: GRADSYNC_RANDOM_SEEDS ("1 2 3" or "100-140"), else the fixed list
// below. A failing seed prints the one command that replays it;
// scripts/random_campaign.sh runs fresh seeds.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/multi_daemon_fixture.h"

namespace gradsync::testutil {
namespace {

// The fixed seeds of the test command: their setups cover 2 to 5 daemons,
// both steady-state modes, and each kind of fault.
constexpr const char* kFixedSeeds = "1-12";

// Every survivor names the failure within this of the fault (a stopped rank
// is told apart from a slow one only by the stall deadline: that on top).
constexpr double kNamedWithinSeconds = 10.0;
constexpr int kStallDeadlineSeconds = 5;

std::vector<uint64_t> seedsToRun() {
  const char* env = std::getenv("GRADSYNC_RANDOM_SEEDS");
  std::stringstream in(env != nullptr && *env != '\0' ? env : kFixedSeeds);
  std::vector<uint64_t> seeds;
  std::string item;
  while (in >> item) {
    const auto dash = item.find('-');
    if (dash == std::string::npos) {
      seeds.push_back(std::stoull(item));
      continue;
    }
    for (uint64_t s = std::stoull(item.substr(0, dash)); s <= std::stoull(item.substr(dash + 1)); ++s) {
      seeds.push_back(s);
    }
  }
  return seeds;
}

enum class FaultKind { kNone, kKillRank, kStopRank, kKillDaemon, kStopDaemon };

const char* faultName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillRank:
      return "kill-rank";
    case FaultKind::kStopRank:
      return "stop-rank";
    case FaultKind::kKillDaemon:
      return "kill-daemon";
    case FaultKind::kStopDaemon:
      return "stop-daemon";
    default:
      return "none";
  }
}

struct RandomSetup {
  uint64_t seed = 0;
  int daemons = 2;
  int size = 2;
  std::vector<int> placement;  // rank -> daemon
  std::vector<std::vector<int>> sets;
  std::string steady_state = "rounds";  // --steady-state: rounds, leader-rounds or leader
  FaultKind fault = FaultKind::kNone;
  int victim = 0;           // the rank that does the fault
  int fault_at = 0;         // at its submission number
  int fault_after_ms = -1;  // or, when >= 0, this long into its program
  int steps = 8;
  int repeat = 0;  // 0: new collectives every step; n: a loop of n steps

  std::string setsArg() const {
    std::string text;
    for (const auto& set : sets) {
      if (!text.empty()) text += ";";
      for (size_t i = 0; i < set.size(); ++i) text += (i ? "," : "") + std::to_string(set[i]);
    }
    return text.empty() ? "-" : text;
  }
  std::string describe() const {
    std::string text = "seed " + std::to_string(seed) + ": " + std::to_string(daemons) + " daemons, " +
                       std::to_string(size) + " ranks at";
    for (int d : placement) text += " " + std::to_string(d);
    text += ", sets " + setsArg() + ", " + steady_state + ", " + std::to_string(steps) + " steps" +
            (repeat ? " repeating every " + std::to_string(repeat) : std::string()) + ", fault " + faultName(fault);
    if (fault != FaultKind::kNone) {
      text += " by rank " + std::to_string(victim) +
              (fault_after_ms >= 0 ? " after " + std::to_string(fault_after_ms) + " ms"
                                   : " at its submission " + std::to_string(fault_at));
    }
    return text;
  }
};

RandomSetup setupOf(uint64_t seed) {
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + 17);
  auto below = [&](int n) { return static_cast<int>(g() % static_cast<uint64_t>(n)); };
  RandomSetup s;
  s.seed = seed;
  s.daemons = 2 + below(4);
  int per_daemon = 1 + below(3);
  while (s.daemons * per_daemon > 9) --per_daemon;  // 2 cores: at most 9 ranks
  s.size = s.daemons * per_daemon;
  for (int r = 0; r < s.size; ++r) s.placement.push_back(r % s.daemons);
  std::shuffle(s.placement.begin(), s.placement.end(), g);
  // Set 1 leaves daemon `out` out (and may leave more ranks out); set 2 is
  // any proper subset.
  const int out = below(s.daemons);
  std::vector<int> first;
  for (int r = 0; r < s.size; ++r) {
    if (s.placement[r] != out && (first.empty() || below(4) != 0)) first.push_back(r);
  }
  s.sets.push_back(first);
  if (s.size > 2 && below(2) == 0) {
    std::vector<int> second;
    for (int r = 0; r < s.size; ++r) {
      if (below(2) == 0) second.push_back(r);
    }
    if (!second.empty() && static_cast<int>(second.size()) < s.size && second != first) s.sets.push_back(second);
  }
  s.steady_state = below(2) == 1 ? "leader" : "rounds";
  // Half the seeds have a fault.
  if (below(2) == 1) {
    s.fault = static_cast<FaultKind>(1 + below(4));
    s.victim = below(s.size);
    s.fault_at = below(12);
    s.steps = 6;
  }
  // Half the seeds repeat their steps' collectives as a training loop does
  // (drawn last: the draws above stay those of earlier versions).
  if (below(2) == 1) s.repeat = 1 + below(2);
  if (below(3) == 0) s.steady_state = "leader-rounds";
  // Half the faults come from a timer, at any moment of the program.
  if (s.fault != FaultKind::kNone && below(2) == 0) s.fault_after_ms = below(700);
  return s;
}

int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The time (steady ns) in the first `tag` line of `log`, or -1.
int64_t stampOf(const std::string& log, const std::string& tag) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(tag + " ([0-9]+)"))) return -1;
  return std::stoll(m[1].str());
}

std::string lineOf(const std::string& log, const std::string& tag) {
  const auto at = log.find(tag + " ");
  if (at == std::string::npos) return "";
  return log.substr(at, log.find('\n', at) - at);
}

class RandomProgramTest : public MultiDaemonTest {
 protected:
  // Runs one seed; returns "" when it passed, else why not.
  std::string runSeed(const RandomSetup& s) {
    std::vector<std::string> flags = {"--steady-state", s.steady_state};
    if (s.fault == FaultKind::kStopRank) {
      flags.insert(flags.end(),
                   {"--stall-warning-seconds", "2", "--stall-deadline-seconds", std::to_string(kStallDeadlineSeconds)});
    }
    startDaemons(s.daemons, flags);
    if (::testing::Test::HasFatalFailure()) return "the daemons did not start";
    std::string fault = faultName(s.fault);
    const int victim_daemon = s.placement[s.victim];
    const bool daemon_fault = s.fault == FaultKind::kKillDaemon || s.fault == FaultKind::kStopDaemon;
    if (s.fault != FaultKind::kNone) {
      fault += ":" + std::to_string(s.victim) + ":" +
               (s.fault_after_ms >= 0 ? "@" + std::to_string(s.fault_after_ms) : std::to_string(s.fault_at));
      if (daemon_fault) fault += ":" + std::to_string(daemons_[victim_daemon]->process().pid());
    }
    const std::string job = "random-" + std::to_string(s.seed);
    auto ranks = launchWith(
        job, {"random", std::to_string(s.seed), std::to_string(s.steps), s.setsArg(), fault, std::to_string(s.repeat)},
        s.placement, {});
    std::string why;
    if (s.fault == FaultKind::kNone) {
      std::string report;
      if (!allSucceed(ranks, std::chrono::seconds(180), &report)) why = "a rank failed:\n" + report;
      if (why.empty()) {
        std::printf("  rank 0: %s\n", lineOf(ranks[0].log(), "RANDOM OK").c_str());
        const CachedWork cached = cachedWork(s.daemons);
        std::printf("  daemons: %s\n", cached.text.c_str());
        why = cached.missing(s, ranOnEveryDaemon(s, ranks));
      }
    } else {
      why = judgeFault(s, ranks, victim_daemon, daemon_fault);
    }
    // What is left: the victim (stopped), ranks of a stopped daemon, then
    // the daemons (a stopped one killed; the rest must exit cleanly).
    for (auto& rank : ranks) {
      rank.kill(SIGKILL);
      rank.wait(std::chrono::seconds(5));
    }
    if (s.fault == FaultKind::kStopDaemon) {
      daemons_[victim_daemon]->process().kill(SIGKILL);
      daemons_[victim_daemon]->process().kill(SIGCONT);
      daemons_[victim_daemon]->waitForExit(std::chrono::seconds(5));
    }
    if (!why.empty() && s.fault != FaultKind::kNone)
      why += "--- the victim, rank " + std::to_string(s.victim) + ":\n" + ranks[s.victim].log();
    if (!why.empty()) why += logs();
    daemons_.clear();  // each daemon's end checked by its fixture
    return why;
  }

  // What the daemons' end lines say of the response cache and the steady
  // state: a loop's repeated collectives must go through them.
  struct CachedWork {
    std::string text;  // the figures, or why there are none
    bool logged = false;
    int64_t hits = 0, rounds = 0, collectives = 0;

    // "" when a loop's collectives went through the cache (and, with
    // rounds, ran after them when some had a rank on every daemon, as
    // rounds need), else why not.
    std::string missing(const RandomSetup& s, bool on_every_daemon) const {
      if (s.repeat == 0) return "";
      if (!logged) return text;
      // A collective run after a round is a cached one too: a loop whose
      // every collective takes the rounds sends none by cache id.
      if (hits == 0 && collectives == 0) return "a loop's collectives never went through the response cache: " + text;
      if (s.steady_state != "leader" && on_every_daemon && collectives == 0) {
        return "a loop's collectives never ran after a steady-state round (" + s.steady_state + "): " + text;
      }
      return "";
    }
  };

  // Whether the ranks ran collectives on a group with a rank on every
  // daemon (the job, or a set that leaves no daemon out), per their
  // "by group" counts.
  bool ranOnEveryDaemon(const RandomSetup& s, std::vector<Process>& ranks) {
    std::vector<bool> covers = {true};
    for (const auto& set : s.sets) {
      std::vector<bool> held(s.daemons, false);
      for (int r : set) held[s.placement[r]] = true;
      covers.push_back(std::all_of(held.begin(), held.end(), [](bool h) { return h; }));
    }
    for (auto& rank : ranks) {
      std::smatch m;
      const std::string line = lineOf(rank.log(), "RANDOM OK");
      if (!std::regex_search(line, m, std::regex("by group ([0-9,]+)"))) continue;
      std::stringstream in(m[1].str());
      std::string count;
      for (size_t g = 0; std::getline(in, count, ','); ++g) {
        if (g < covers.size() && covers[g] && std::stoi(count) > 0) return true;
      }
    }
    return false;
  }

  CachedWork cachedWork(int daemons) {
    const std::regex ended(
        "' ended: .* ([0-9]+) response-cache hits, .* ([0-9]+) steady-state rounds, .* ([0-9]+) "
        "collectives run after them");
    CachedWork work;
    for (int d = 0; d < daemons; ++d) {
      std::smatch m;
      std::string log;
      waitFor(
          [&] {
            log = daemons_[d]->log();
            return std::regex_search(log, m, ended);
          },
          std::chrono::seconds(5));
      if (m.empty()) {
        work.text = "daemon " + std::to_string(d) + " logged no end of the job";
        return work;
      }
      work.hits += std::stoll(m[1].str());
      work.rounds += std::stoll(m[2].str());
      work.collectives += std::stoll(m[3].str());
    }
    work.logged = true;
    work.text = std::to_string(work.hits) + " response-cache hits, " + std::to_string(work.rounds) +
                " steady-state rounds, " + std::to_string(work.collectives) + " collectives run after them";
    return work;
  }

  // For a rank still waiting: what each daemon still holds of the job.
  std::string whatTheDaemonsWaitFor(const RandomSetup& s) {
    std::string text;
    const bool daemon_fault = s.fault == FaultKind::kKillDaemon || s.fault == FaultKind::kStopDaemon;
    for (int d = 0; d < s.daemons; ++d) {
      if (daemon_fault && d == s.placement[s.victim]) continue;
      for (const char* what : {"jobs", "tensors"}) {
        const CtlRun run = daemons_[d]->ctl({"--timeout", "3", what});
        text += "--- daemon " + std::to_string(d) + ", gradsyncctl " + what + " (exit " + std::to_string(run.code) +
                "):\n" + run.output;
      }
    }
    return text;
  }

  // Every survivor ends on an error, named, in time; none gets a result wrong.
  std::string judgeFault(const RandomSetup& s, std::vector<Process>& ranks, int victim_daemon, bool daemon_fault) {
    const double limit = kNamedWithinSeconds + (s.fault == FaultKind::kStopRank ? kStallDeadlineSeconds : 0);
    // What every survivor's error must name: the victim's daemon (its peer
    // address), or the victim rank.
    const std::string v = std::to_string(s.victim);
    const std::string named =
        daemon_fault ? daemons_[victim_daemon]->peerAddress() : "rank " + v + " |ranks \\[(.*, )?" + v + "(\\]|,)";
    std::string why;
    std::string victim_log;
    bool waits_shown = false;
    int64_t fault_at = -1;
    // The victim's FAULT line (it comes before any survivor can fail).
    waitFor(
        [&] {
          fault_at = stampOf(ranks[s.victim].log(), "FAULT");
          return fault_at >= 0;
        },
        std::chrono::seconds(120));
    if (fault_at < 0) return "the victim never reached its fault:\n" + ranks[s.victim].log();
    // A survivor still running a second before its time is up: what the
    // daemons hold then (the wait below kills it at the end).
    const auto survivor = [&](int r) { return r != s.victim && !(daemon_fault && s.placement[r] == victim_daemon); };
    const int64_t look_ns = fault_at + static_cast<int64_t>((scaled(limit) + 4) * 1e9) - steadyNanos();
    waitFor(
        [&] {
          for (int r = 0; r < s.size; ++r) {
            if (survivor(r) && ranks[r].running()) return false;
          }
          return true;
        },
        std::chrono::milliseconds(std::max<int64_t>(look_ns / 1000000, 1)));
    std::string held;
    for (int r = 0; r < s.size && held.empty(); ++r) {
      if (survivor(r) && ranks[r].running()) held = whatTheDaemonsWaitFor(s);
    }
    for (int r = 0; r < s.size; ++r) {
      if (!survivor(r)) continue;
      const int64_t left_ns = fault_at + static_cast<int64_t>((scaled(limit) + 5) * 1e9) - steadyNanos();
      const int code = ranks[r].wait(std::chrono::milliseconds(std::max<int64_t>(left_ns / 1000000, 1)));
      const std::string log = ranks[r].log();
      const std::string rank = "rank " + std::to_string(r) + " (daemon " + std::to_string(s.placement[r]) + ")";
      if (code != 0) {
        why += rank + (code == -1 ? " was still waiting" : " exited " + std::to_string(code)) + ":\n" + log;
        if (code == -1 && !waits_shown) why += held;
        waits_shown = waits_shown || code == -1;
        continue;
      }
      const int64_t named_at = stampOf(log, "NAMED");
      const double seconds = static_cast<double>(named_at - fault_at) / 1e9;
      const std::string line = lineOf(log, "NAMED");
      std::printf("  %s after %.2f s: %s\n", rank.c_str(), seconds, line.c_str());
      if (named_at < 0) {
        why += rank + " ended without an error:\n" + log;
      } else if (seconds > scaled(limit)) {
        why += rank + " named the failure only after " + std::to_string(seconds) + " s: " + line + "\n";
      } else if (line.find(named) == std::string::npos && !std::regex_search(line, std::regex(named))) {
        why += rank + "'s error does not name " + named + ": " + line + "\n";
      }
    }
    return why;
  }
};

TEST_F(RandomProgramTest, EveryResultRightOrEveryFailureNamed) {
  int failed = 0;
  const auto seeds = seedsToRun();
  for (uint64_t seed : seeds) {
    const RandomSetup s = setupOf(seed);
    std::printf("%s\n", s.describe().c_str());
    std::fflush(stdout);
    const auto started = std::chrono::steady_clock::now();
    const std::string why = runSeed(s);
    std::printf("  %s in %.1f s\n", why.empty() ? "passed" : "FAILED",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    if (!why.empty()) {
      ++failed;
      ADD_FAILURE() << s.describe() << "\n"
                    << why
                    << "\nreplay: bazel test //tests/integration:random_test --test_env=GRADSYNC_RANDOM_SEEDS=" << seed
                    << " --test_output=streamed --nocache_test_results";
    }
  }
  std::printf("%zu seeds, %d failed\n", seeds.size(), failed);
}

}  // namespace
}  // namespace gradsync::testutil
