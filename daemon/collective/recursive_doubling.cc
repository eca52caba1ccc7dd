// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/recursive_doubling.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "daemon/collective/reduce/cpu_reduce.h"

namespace gradsync::collective {
namespace {
// Phase 6 of the data plane's tag space (ring 0 and 1, pairwise exchange
// 2, rounds 3, goodbye 4, direct allreduce 5).
constexpr int kAllreducePhase = 6;
// The stages of the swap and of the result, apart from the exchanges'.
constexpr int kSwapStage = 0;
constexpr int kResultStage = 63;

bool receives(DoublingStep::Kind kind) { return kind != DoublingStep::kSend; }
}  // namespace

std::vector<DoublingStep> doublingSteps(int rank, int n) {
  std::vector<DoublingStep> steps;
  if (n <= 1 || rank < 0 || rank >= n) return steps;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  if (rank >= p) {
    steps.push_back({DoublingStep::kSwap, rank - p, kSwapStage});
    steps.push_back({DoublingStep::kReceive, rank - p, kResultStage});
    return steps;
  }
  const bool absorbs = rank + p < n;
  if (absorbs) steps.push_back({DoublingStep::kExchange, rank + p, kSwapStage});
  int stage = 1;
  for (int distance = 1; distance < p; distance *= 2)
    steps.push_back({DoublingStep::kExchange, rank ^ distance, stage++});
  if (absorbs) steps.push_back({DoublingStep::kSend, rank + p, kResultStage});
  return steps;
}

RecursiveDoubling::RecursiveDoubling(const MeshContext& mesh, int phase, size_t bytes)
    : mesh_(mesh), phase_(phase), bytes_(bytes), steps_(doublingSteps(mesh.rank, mesh.size())) {
  inbox_.resize(bytes_ * steps_.size());
}

RecursiveDoubling::~RecursiveDoubling() = default;

uint64_t RecursiveDoubling::tag(int from, int stage) const {
  return ringTag(mesh_.tag_key, mesh_.id, phase_, from, static_cast<size_t>(stage), from);
}

std::vector<transport::Request*> RecursiveDoubling::postReceives() {
  if (receives_.empty()) {
    receives_.resize(steps_.size());
    for (size_t i = 0; i < steps_.size(); ++i) {
      const DoublingStep& s = steps_[i];
      if (receives(s.kind)) {
        receives_[i] = mesh_.peers[s.peer]->irecv(inbox_.data() + i * bytes_, bytes_, tag(s.peer, s.stage));
      }
    }
  }
  std::vector<transport::Request*> raw;
  for (auto& r : receives_) {
    if (r) raw.push_back(r.get());
  }
  return raw;
}

Status RecursiveDoubling::run(uint8_t* data, const DoublingCombine& combine, const std::string& what,
                              const std::function<std::string()>& interrupted) {
  postReceives();
  for (size_t i = 0; i < steps_.size(); ++i) {
    const DoublingStep& s = steps_[i];
    std::vector<transport::RequestPtr> sends;
    std::vector<transport::Request*> raw;
    if (s.kind != DoublingStep::kReceive) {
      sends.push_back(mesh_.peers[s.peer]->isend(data, bytes_, tag(mesh_.rank, s.stage)));
      raw.push_back(sends.back().get());
      ++sent_;
    }
    if (receives(s.kind)) raw.push_back(receives_[i].get());
    const std::string step = what + ": node " + std::to_string(mesh_.rank) + " with node " + std::to_string(s.peer) +
                             " (recursive doubling, step " + std::to_string(i + 1) + " of " +
                             std::to_string(steps_.size()) + ")";
    // Until the deadline; with `interrupted`, in slices, asking between them.
    constexpr auto kSlice = std::chrono::milliseconds(20);
    for (;;) {
      const auto until = interrupted ? std::min(mesh_.deadline, transport::Clock::now() + kSlice) : mesh_.deadline;
      const Status waited = mesh_.transport->waitAll(raw.data(), raw.size(), until, step);
      if (waited.isOk()) break;
      if (waited.code() != StatusCode::kDeadlineExceeded || until >= mesh_.deadline) return waited;
      const std::string reason = interrupted();
      if (!reason.empty()) return aborted(step + ": " + reason);
    }
    const uint8_t* theirs = inbox_.data() + i * bytes_;
    if (s.kind == DoublingStep::kExchange) combine(theirs, data, s.peer < mesh_.rank);
    if (s.kind == DoublingStep::kReceive) std::memcpy(data, theirs, bytes_);
  }
  receives_.clear();
  return okStatus();
}

Status recursiveDoublingAllreduce(const MeshContext& mesh, void* data, size_t count, DataType dtype, ReduceOp op) {
  const int n = mesh.size();
  if (n <= 1 || count == 0) return okStatus();
  if (mesh.rank < 0 || mesh.rank >= n) return invalidArgument("recursive doubling: position outside the mesh");
  if (op == v1::AVERAGE) op = v1::SUM;
  const size_t esize = elementSize(dtype);
  if (esize == 0) return invalidArgument("recursive doubling: unknown dtype");
  const size_t bytes = count * esize;
  const DoublingCombine combine = [&](const uint8_t* theirs, uint8_t* mine, bool theirs_first) {
    reduce::combineInto(dtype, op, theirs, mine, count, theirs_first);
  };
  RecursiveDoubling doubling(mesh, kAllreducePhase, bytes);
  return doubling.run(static_cast<uint8_t*>(data), combine, "allreduce of " + std::to_string(bytes) + " bytes");
}

}  // namespace gradsync::collective
