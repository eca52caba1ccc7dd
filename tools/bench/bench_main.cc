// SPDX-License-Identifier: Apache-2.0
// gradsync_bench: collective throughput and latency through a running
// gradsyncd, in the manner of nccl-tests' all_reduce_perf. Forks -np ranks,
// each a real client process of one job.
//
//   gradsync_bench --socket PATH [-np 2] [--collective allreduce|broadcast|allgather|reducescatter|alltoall]
//                  [--min-bytes 4] [--max-bytes 256M] [--copy] [--device cpu|cuda] [--min-time 1] [--resnet]
//                  [--no-barrier]
//
// Per size: a correctness check (inputs rank+1, result checked everywhere),
// then timed iterations of barrier; t0; collective; t1 until at least
// --min-iters and --min-time seconds; the time of an iteration is the max
// over ranks (as in shared/bench/peers); --no-barrier: back to back. Reports the median, algbw and busbw
// (nccl-tests: allreduce busbw = algbw * 2(n-1)/n; allgather (n-1)/n;
// broadcast = algbw).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gradsync/gradsync.hpp"
#include "tools/bench/bench_runner.h"

namespace gradsync::bench {
namespace {

uint64_t parseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<uint64_t>(v);
}

int usage() {
  std::fprintf(stderr,
               "usage: gradsync_bench --socket PATH[,PATH...] [--leader HOST:PORT] [-np N]\n"
               "                      [--collective allreduce|broadcast|allgather|reducescatter|alltoall]\n"
               "                      [--min-bytes B] [--max-bytes B] [--step-factor F] [--copy] [--device cpu|cuda]\n"
               "                      [--min-time S] [--min-iters N] [--no-barrier] [--resnet] [--steps N]\n");
  return 64;
}

// Whether the options name a benchmark this tool measures.
bool valid(const BenchOptions& o) {
  const bool known = o.collective == "allreduce" || o.collective == "broadcast" || o.collective == "allgather" ||
                     ((o.collective == "reducescatter" || o.collective == "alltoall") &&
                      o.device == "cpu");  // CUDA outputs: not measured
  return known && !o.socket.empty() && o.ranks >= 1 && (o.device == "cpu" || o.device == "cuda") &&
         (o.step_factor == 0 || o.step_factor >= 2) && o.min_bytes > 0;
}

bool parse(int argc, char** argv, BenchOptions* o) {
  using Setter = std::function<void(const std::string&)>;
  const std::map<std::string, Setter> with_value = {
      {"--socket", [o](const std::string& v) { o->socket = v; }},
      {"--leader", [o](const std::string& v) { o->leader = v; }},
      {"-np", [o](const std::string& v) { o->ranks = std::atoi(v.c_str()); }},
      {"--collective", [o](const std::string& v) { o->collective = v; }},
      {"--min-bytes", [o](const std::string& v) { o->min_bytes = parseBytes(v); }},
      {"--max-bytes", [o](const std::string& v) { o->max_bytes = parseBytes(v); }},
      {"--step-factor", [o](const std::string& v) { o->step_factor = std::atoi(v.c_str()); }},
      {"--device", [o](const std::string& v) { o->device = v; }},
      {"--min-time", [o](const std::string& v) { o->min_time = std::atof(v.c_str()); }},
      {"--min-iters", [o](const std::string& v) { o->min_iters = std::atoi(v.c_str()); }},
      {"--steps", [o](const std::string& v) { o->steps = std::atoi(v.c_str()); }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--copy") {
      o->zero_copy = false;
    } else if (a == "--no-barrier") {
      o->barrier = false;
    } else if (a == "--resnet") {
      o->resnet = true;
    } else if (auto it = with_value.find(a); it != with_value.end()) {
      it->second(i + 1 < argc ? argv[++i] : "");
    } else {
      return false;
    }
  }
  return valid(*o);
}

}  // namespace
}  // namespace gradsync::bench

int main(int argc, char** argv) {
  using namespace gradsync::bench;
  BenchOptions options;
  if (!parse(argc, argv, &options)) return usage();
  char token[33];
  std::snprintf(token, sizeof(token), "%08x%08x", static_cast<unsigned>(getpid()),
                static_cast<unsigned>(time(nullptr)));
  const std::string job = "bench-" + std::to_string(getpid());
  std::vector<std::string> sockets;
  for (size_t start = 0; start <= options.socket.size();) {
    const size_t comma = options.socket.find(',', start);
    const size_t end = comma == std::string::npos ? options.socket.size() : comma;
    sockets.push_back(options.socket.substr(start, end - start));
    start = end + 1;
  }
  const int n = options.ranks;
  const int nodes = static_cast<int>(sockets.size());
  auto node_of = [&](int rank) { return rank * nodes / n; };
  std::vector<pid_t> children;
  for (int r = 0; r < options.ranks; ++r) {
    int local_rank = 0, local_size = 0;
    for (int q = 0; q < n; ++q) {
      if (node_of(q) != node_of(r)) continue;
      local_rank += q < r;
      ++local_size;
    }
    pid_t pid = fork();
    if (pid == 0) {
      setenv("GRADSYNC_SOCKET", sockets[node_of(r)].c_str(), 1);
      setenv("GRADSYNC_LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
      setenv("GRADSYNC_LOCAL_SIZE", std::to_string(local_size).c_str(), 1);
      if (!options.leader.empty()) setenv("GRADSYNC_LEADER", options.leader.c_str(), 1);
      setenv("GRADSYNC_JOB_ID", job.c_str(), 1);
      setenv("GRADSYNC_TOKEN", token, 1);
      setenv("GRADSYNC_RANK", std::to_string(r).c_str(), 1);
      setenv("GRADSYNC_SIZE", std::to_string(options.ranks).c_str(), 1);
      const int code = runRank(options);
      std::fflush(stdout);
      _exit(code);
    }
    children.push_back(pid);
  }
  int worst = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    worst = std::max(worst, code);
  }
  return worst;
}
