// SPDX-License-Identifier: Apache-2.0
// One rank of gradsync_bench.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync::bench {

struct BenchOptions {
  // One daemon socket, or several separated by commas: ranks are placed on
  // them in blocks (rank r on socket r * sockets / ranks); --leader then
  // names the peer address of the first daemon.
  std::string socket;
  std::string leader;
  int ranks = 2;
  std::string collective = "allreduce";
  uint64_t min_bytes = 4;
  uint64_t max_bytes = 256ull << 20;
  // 0: the peers' sizes (4 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB, 256 MiB);
  // otherwise min_bytes * step_factor^k.
  int step_factor = 0;
  bool zero_copy = true;
  std::string device = "cpu";  // "cuda": tensors in device memory, reduced by the daemon on the GPU
  double min_time = 1.0;
  int min_iters = 10;
  // False: the timed iterations run back to back, without the barrier that
  // aligns the ranks before each (a barrier goes through the leader: this
  // shows the collective's own cost to the daemons; an iteration's time
  // then includes waiting for the slowest rank's previous one).
  bool barrier = true;
  bool resnet = false;
  int steps = 20;
};

// Runs the benchmark as one rank (identity from GRADSYNC_*); rank 0 prints
// the table. Returns the process exit code.
int runRank(const BenchOptions& options);

}  // namespace gradsync::bench
