// SPDX-License-Identifier: Apache-2.0
// ring_bench: the daemon-to-daemon ring allreduce alone, N nodes as threads
// of one process each with its own UCX worker (set UCX_TLS, e.g. tcp), float32
// sum, median time and busbw per size. A benchmark, not a test.
//   UCX_TLS=tcp ring_bench [nodes=2] [max_bytes=268435456] [chunk_bytes=1048576]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "daemon/collective/ring_allreduce.h"
#include "daemon/transport/ucx/ucx_transport.h"

using namespace gradsync;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{256} << 20;
  const size_t chunk = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : size_t{1} << 20;
  std::vector<std::unique_ptr<transport::UcxTransport>> transports;
  for (int r = 0; r < n; ++r) transports.push_back(std::move(transport::UcxTransport::create().value()));
  std::vector<transport::PeerPtr> left(n), right(n);
  for (int r = 0; r < n; ++r) {
    const int l = (r - 1 + n) % n, rt = (r + 1) % n;
    left[r] = std::move(transports[r]->connect(transports[l]->address(), "node " + std::to_string(l)).value());
    if (rt != l)
      right[r] = std::move(transports[r]->connect(transports[rt]->address(), "node " + std::to_string(rt)).value());
  }
  std::printf("# ring allreduce, %d nodes (threads), float32 sum, chunk %zu bytes\n", n, chunk);
  std::printf("%12s %8s %12s %10s %10s\n", "bytes", "iters", "median_us", "algbw", "busbw");
  uint64_t sequence = 1;
  for (size_t bytes = 4; bytes <= max_bytes; bytes = bytes < 4096 ? 4096 : bytes * 16) {
    const size_t count = std::max<size_t>(1, bytes / 4);
    std::vector<std::vector<float>> data(n, std::vector<float>(count, 0.0f));
    const int iters = bytes >= (64 << 20) ? 8 : 30;
    std::vector<double> times;
    for (int it = 0; it < iters; ++it, ++sequence) {
      std::vector<double> per(n);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          collective::RingContext ring;
          ring.transport = transports[r].get();
          ring.left = left[r].get();
          ring.right = right[r] ? right[r].get() : left[r].get();
          ring.rank = r;
          ring.size = n;
          ring.id.batch = sequence;
          ring.deadline = transport::Clock::now() + std::chrono::seconds(60);
          ring.chunk_bytes = chunk;
          std::vector<uint8_t> scratch;
          const auto t0 = std::chrono::steady_clock::now();
          Status s = collective::ringAllreduce(ring, data[r].data(), count, v1::FLOAT32, v1::SUM, &scratch);
          per[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (!s.isOk()) std::fprintf(stderr, "%s\n", s.toString().c_str());
        });
      }
      for (auto& t : threads) t.join();
      times.push_back(*std::max_element(per.begin(), per.end()));
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double algbw = count * 4.0 / median / 1e9;
    std::printf("%12zu %8d %12.1f %10.3f %10.3f\n", count * 4, iters, median * 1e6, algbw, algbw * 2 * (n - 1) / n);
  }
  return 0;
}
