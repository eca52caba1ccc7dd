// SPDX-License-Identifier: Apache-2.0
// gradsyncd's process as a function, so that a test build can run the same
// daemon over host-memory doubles of GPUs (tests/fakegpu).
#pragma once

#include "daemon/exe/daemon.h"

namespace gradsync::exe {

// Parses options, starts the daemon with `make_gpus` (null: the real GPUs),
// serves until SIGTERM/SIGINT and returns the process exit code.
int daemonMain(int argc, char** argv, GpuFactory make_gpus);

}  // namespace gradsync::exe
