// SPDX-License-Identifier: Apache-2.0
// The control plane of one job in one process, no daemons: what one step
// of T allreduces by W ranks (N nodes of W/N ranks) costs the leader and a
// follower, and what travels.
//
//   bazel run -c opt //daemon/peer:control_plane_bench -- [--ranks W] [--tensors T]
//       [--ranks-per-node L] [--steps S]
//
// Per step: every rank's request of every tensor; the requests of the
// followers' ranks go through the codec as they travel (compact at the
// follower, expanded at the leader), the leader's negotiator decides, and
// the batch is encoded and cut into parts as the leader sends it. The
// leader's time: expanding, negotiating, encoding and cutting. A follower's
// time: compacting its own ranks' requests, assembling and decoding the
// batch. Bytes: one follower's share of the leader's egress (the batch),
// and what one follower sends. The first step fills the response cache; the
// figures are medians of the later (steady) steps.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/coordinator/negotiator.h"
#include "daemon/coordinator/request_wire.h"
#include "daemon/peer/batch_parts.h"
#include "daemon/peer/coordination_codec.h"

namespace gradsync::peer {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int ranks = 64;
  int tensors = 161;
  int ranks_per_node = 8;
  int steps = 5;
};

struct StepFigures {
  double leader_ms = 0;
  double follower_ms = 0;
  size_t batch_bytes = 0;     // to each follower
  size_t largest_part = 0;    // the largest message of the batch
  size_t follower_bytes = 0;  // the follower's requests
};

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

coordinator::Request requestOf(int rank, int tensor, uint64_t step) {
  coordinator::Request r;
  r.rank = rank;
  r.handle = step * 1000000 + tensor + 1;
  r.name = "layer" + std::to_string(tensor) + ".grad";
  r.type = v1::ALLREDUCE;
  r.dtype = v1::FLOAT32;
  r.shape = {1000 + tensor};
  r.op = v1::SUM;
  r.length = 4 * static_cast<uint64_t>(1000 + tensor);
  r.offset = 4096 * static_cast<uint64_t>(tensor);
  return r;
}

class Job {
 public:
  explicit Job(const Options& o)
      : o_(o),
        negotiator_("bench", o.ranks, {}),
        leader_("bench", 1 << 20),
        follower_("bench", 1 << 20),
        others_("bench", 1 << 20) {}

  // One step; the leader is node 0 (ranks [0, L)), the measured follower
  // node 1 (ranks [L, 2L)); "others" stands for every other follower.
  StepFigures step(uint64_t n) {
    StepFigures f;
    const int l = o_.ranks_per_node;
    std::vector<v1::FollowerMessage::Request> forwarded;
    forwarded.reserve(static_cast<size_t>(o_.tensors) * (o_.ranks - l));
    Clock::time_point start = Clock::now();
    for (int t = 0; t < o_.tensors; ++t) {
      for (int rank = l; rank < 2 * l && rank < o_.ranks; ++rank) {
        forwarded.push_back(follower_.compact(rank, coordinator::enqueueOf(requestOf(rank, t, n)), 1));
        f.follower_bytes += forwarded.back().ByteSizeLong();
      }
    }
    f.follower_ms += msSince(start);
    for (int t = 0; t < o_.tensors; ++t) {
      for (int rank = 2 * l; rank < o_.ranks; ++rank) {
        forwarded.push_back(others_.compact(rank, coordinator::enqueueOf(requestOf(rank, t, n)), 1));
      }
    }
    // The leader: its own ranks' requests and the forwarded ones.
    start = Clock::now();
    std::vector<coordinator::Response> ready;
    const auto now = Clock::now();
    auto take = [&](coordinator::Request request) {
      auto out = negotiator_.submit(std::move(request), now);
      if (!out.isOk()) {
        std::fprintf(stderr, "negotiation failed: %s\n", out.status().message().c_str());
        std::exit(1);
      }
      for (auto& r : *out) ready.push_back(std::move(r));
    };
    for (int t = 0; t < o_.tensors; ++t) {
      for (int rank = 0; rank < l && rank < o_.ranks; ++rank) take(requestOf(rank, t, n));
    }
    for (const auto& message : forwarded) {
      auto enqueue = leader_.expand(message);
      if (!enqueue.isOk()) {
        std::fprintf(stderr, "%s\n", enqueue.status().message().c_str());
        std::exit(1);
      }
      take(coordinator::requestOf(message.rank(), *enqueue));
    }
    v1::Batch batch;
    batch.set_sequence(n + 1);
    batch.set_epoch(1);
    for (const auto& r : ready) *batch.add_responses() = leader_.encode(r);
    std::vector<v1::Batch> parts = splitBatch(batch);
    f.leader_ms = msSince(start);
    for (const auto& part : parts) {
      f.batch_bytes += part.ByteSizeLong();
      f.largest_part = std::max(f.largest_part, part.ByteSizeLong());
    }
    // The follower takes the batch; the others learn the cache (untimed).
    start = Clock::now();
    decodeAll(&follower_, &follower_parts_, parts);
    f.follower_ms += msSince(start);
    decodeAll(&others_, &others_parts_, parts);
    if (static_cast<int>(ready.size()) != o_.tensors) {
      std::fprintf(stderr, "step %lu: %zu responses, want %d\n", static_cast<unsigned long>(n), ready.size(),
                   o_.tensors);
      std::exit(1);
    }
    return f;
  }

 private:
  static void decodeAll(CoordinationCodec* codec, BatchAssembler* assembler, const std::vector<v1::Batch>& parts) {
    for (const auto& part : parts) {
      auto whole = assembler->add(part);
      if (!whole.isOk()) {
        std::fprintf(stderr, "%s\n", whole.status().message().c_str());
        std::exit(1);
      }
      if (!whole->has_value()) continue;
      for (const auto& r : (*whole)->responses()) {
        auto decoded = codec->decode(r);
        if (!decoded.isOk()) {
          std::fprintf(stderr, "%s\n", decoded.status().message().c_str());
          std::exit(1);
        }
      }
    }
  }

  const Options o_;
  coordinator::Negotiator negotiator_;
  CoordinationCodec leader_, follower_, others_;
  BatchAssembler follower_parts_, others_parts_;
};

template <typename T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const Options& o) {
  const size_t heap_before = mallinfo2().uordblks;
  Job job(o);
  std::vector<StepFigures> steady;
  StepFigures first;
  for (int s = 0; s < o.steps; ++s) {
    StepFigures f = job.step(s);
    if (s == 0) {
      first = f;
    } else {
      steady.push_back(f);
    }
  }
  const double heap_mib = static_cast<double>(mallinfo2().uordblks - heap_before) / (1 << 20);
  auto pick = [&](auto field) {
    std::vector<double> v;
    for (const auto& f : steady) v.push_back(static_cast<double>(field(f)));
    return v.empty() ? 0.0 : median(v);
  };
  std::printf(
      "W %6d  T %5d  L %2d | leader %9.2f ms/step  follower %8.2f ms/step | batch to a follower %10.0f B (first step "
      "%10zu B, largest message %8zu B) | follower sends %9.0f B | heap %7.1f MiB\n",
      o.ranks, o.tensors, o.ranks_per_node, pick([](const StepFigures& f) { return f.leader_ms; }),
      pick([](const StepFigures& f) { return f.follower_ms; }),
      pick([](const StepFigures& f) { return f.batch_bytes; }), first.batch_bytes,
      std::max(first.largest_part, static_cast<size_t>(pick([](const StepFigures& f) { return f.largest_part; }))),
      pick([](const StepFigures& f) { return f.follower_bytes; }), heap_mib);
  return 0;
}

}  // namespace
}  // namespace gradsync::peer

int main(int argc, char** argv) {
  gradsync::peer::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--ranks") == 0) {
      o.ranks = value;
    } else if (std::strcmp(argv[i], "--tensors") == 0) {
      o.tensors = value;
    } else if (std::strcmp(argv[i], "--ranks-per-node") == 0) {
      o.ranks_per_node = value;
    } else if (std::strcmp(argv[i], "--steps") == 0) {
      o.steps = value;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 64;
    }
  }
  if (o.ranks < 2 * o.ranks_per_node || o.tensors < 1 || o.steps < 2) {
    std::fprintf(stderr, "need --ranks >= 2 x --ranks-per-node, --tensors >= 1, --steps >= 2\n");
    return 64;
  }
  return gradsync::peer::run(o);
}
