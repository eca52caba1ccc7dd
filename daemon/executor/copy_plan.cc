// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/copy_plan.h"

#include <algorithm>
#include <cstring>

#include "base/fast_copy.h"

namespace gradsync::executor {
namespace {
constexpr size_t kPieceBytes = 1 << 20;
}  // namespace

void CopyPlan::add(uint8_t* dst, const uint8_t* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  for (size_t done = 0; done < bytes; done += kPieceBytes) {
    copies_.push_back({dst + done, src + done, std::min(kPieceBytes, bytes - done)});
  }
  total_ += bytes;
}

void CopyPlan::run(ReducePool& pool) const {
  if (copies_.empty()) return;
  if (total_ < 2 * kPieceBytes) {
    for (const auto& c : copies_) std::memmove(c.dst, c.src, c.bytes);
    return;
  }
  pool.forEachShard(copies_.size(), [this](size_t i) {
    const Copy& c = copies_[i];
    fastCopy(c.dst, c.src, c.bytes);
  });
}

}  // namespace gradsync::executor
