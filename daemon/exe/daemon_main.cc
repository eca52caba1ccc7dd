// SPDX-License-Identifier: Apache-2.0
// gradsyncd's process: options, signals, the daemon's life.
#include "daemon/exe/daemon_main.h"

#include <absl/synchronization/mutex.h>
#include <google/protobuf/text_format.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/common/logging.h"
#include "daemon/exe/daemon.h"
#include "daemon/exe/options.h"

namespace gradsync::exe {
namespace {

// Shutdown fails every job and stops the servers within seconds. If anything
// holds the process longer (a GPU stream that never drains, the driver's
// teardown at exit), it ends anyway after this long, or at a second signal.
constexpr int kShutdownLimitSeconds = 30;

void endShutdownWithin(const sigset_t& signals) {
  std::thread([signals] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kShutdownLimitSeconds);
    int signo = -1;
    for (;;) {  // interruptions (a sanitizer stopping threads at exit) are not the end
      const auto left =
          std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timespec limit{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
      siginfo_t info;
      signo = sigtimedwait(&signals, &info, &limit);
      if (signo > 0 || errno != EINTR) break;
    }
    if (signo > 0) {
      GS_LOG(main, critical, "received signal {} while shutting down; exiting now", signo);
    } else {
      GS_LOG(main, critical, "shutdown did not finish within {} s; exiting now", kShutdownLimitSeconds);
    }
    std::_Exit(1);
  }).detach();
}

// Once the shutdown is done (jobs failed, clients told, servers stopped),
// what is left is the libraries' teardown: gRPC's joins its threads, which
// can wait several seconds on a client that stopped reading its stream.
// Nothing of the daemon's depends on it any more: past this long the
// process exits all the same, with the code of a clean shutdown.
constexpr int kTeardownLimitSeconds = 3;

// Destroys `daemon` (the teardown), exiting after kTeardownLimitSeconds if
// that takes longer.
void tearDownWithin(std::unique_ptr<Daemon> daemon) {
  struct Watch {
    Mutex mutex;
    CondVar cv;
    bool done GS_GUARDED_BY(mutex) = false;
  };
  auto watch = std::make_shared<Watch>();
  std::thread([watch] {
    MutexLock lock(watch->mutex);
    if (watch->cv.wait_for(lock, std::chrono::seconds(kTeardownLimitSeconds),
                           [&]() GS_REQUIRES(watch->mutex) { return watch->done; })) {
      return;
    }
    GS_LOG(main, warn, "the libraries' teardown did not finish within {} s; exiting now", kTeardownLimitSeconds);
    std::_Exit(0);
  }).detach();
  daemon.reset();
  MutexLock lock(watch->mutex);
  watch->done = true;
  watch->cv.notify_all();
}

// SIGHUP: the configuration is read again as at start (file, then flags).
void reload(Daemon& daemon, int argc, char** argv) {
  GS_LOG(main, info, "SIGHUP: reading the configuration again");
  auto options = exe::parseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (!options.isOk()) {
    GS_LOG(main, err, "reload: the configuration is not valid, nothing changed: {}", options.status().message());
    return;
  }
  daemon.reload(options->config);
}

}  // namespace

int daemonMain(int argc, char** argv, GpuFactory make_gpus) {
  auto options = exe::parseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (!options.isOk()) {
    std::fprintf(stderr, "gradsyncd: %s\n", options.status().message().c_str());
    return 64;
  }
  if (options->show_help) {
    std::fputs(exe::usage().c_str(), stdout);
    return 0;
  }
  if (options->show_version) {
    std::printf("gradsyncd %s\n", exe::kVersion);
    return 0;
  }
  if (options->check_config) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(options->config, &text);
    std::printf("# configuration OK\n%s", text.c_str());
    return 0;
  }
  // Debian builds Abseil without NDEBUG: every absl::Mutex gRPC takes
  // would update a lock-order graph (GraphCycles), 6 % of a leader's CPU
  // with a thousand followers. Off before any thread starts.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Signals are taken synchronously by this thread; every thread started
  // from here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = exe::Daemon::start(options->config, std::move(make_gpus));
  if (!daemon.isOk()) {
    GS_LOG(main, critical, "cannot start: {}", daemon.status().toString());
    return 1;
  }
  int signo = 0;
  do {
    sigwait(&signals, &signo);
    if (signo == SIGHUP) reload(**daemon, argc, argv);
  } while (signo == SIGHUP);
  GS_LOG(main, info, "received signal {}", signo);
  endShutdownWithin(signals);
  (*daemon)->shutdown();
  GS_LOG(main, info, "stopped");
  tearDownWithin(std::move(daemon).value());
  return 0;
}

}  // namespace gradsync::exe
