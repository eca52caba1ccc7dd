// SPDX-License-Identifier: Apache-2.0
// A batch of negotiated responses travels from the leader in parts of at
// most a byte budget each (1 MiB: kBatchPartBytes), so that no coordination
// message grows with the job: a response with more ranks than fit in one
// part is cut between its requests (NegotiatedResponse.continued), and every
// part but the last says `more`. The follower's BatchAssembler joins the
// parts of the batch its stream delivers in order, and hands the batch over
// once whole.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "base/status.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

constexpr size_t kBatchPartBytes = size_t{1} << 20;

// `whole` in parts whose encoded size stays within `budget` bytes (a part
// holds at least one request or response, so a single request above the
// budget still goes, alone).
std::vector<v1::Batch> splitBatch(v1::Batch whole, size_t budget = kBatchPartBytes);

class BatchAssembler {
 public:
  // Adds the next part read from the stream; the whole batch once its last
  // part came, else nothing. DATA_LOSS when a part does not continue the
  // batch being assembled (another sequence, a response it cannot continue),
  // or when the assembled batch would pass `limit` bytes.
  StatusOr<std::optional<v1::Batch>> add(v1::Batch part);
  // Drops a batch half assembled (the stream to the leader was lost).
  void reset();

  static constexpr size_t kLimit = size_t{1} << 30;

 private:
  std::optional<v1::Batch> partial_;
  size_t bytes_ = 0;
};

}  // namespace gradsync::peer
