// SPDX-License-Identifier: Apache-2.0
// A job's membership (every node, about 200 B each, more with long UCX
// addresses) travels in parts of at most a byte budget, so that no message
// grows with the job: the message that announces it (JoinJobResponse,
// NewEpoch, ElectResponse) holds its first nodes and says how many there
// are (node_count), and the receiver reads the rest from the leader with
// Members calls. The leader keeps the memberships of its last few epochs to
// answer them (PublishedMembers).
#pragma once

#include <google/protobuf/repeated_ptr_field.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "base/status.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

using NodeList = google::protobuf::RepeatedPtrField<v1::NodeInfo>;

// 512 KiB of nodes: a part and its message stay well under 1 MiB.
constexpr size_t kMembershipPartBytes = size_t{1} << 19;

// Keeps the first nodes of `nodes` whose encoded size stays within `budget`
// (at least one) and drops the rest. Returns how many there were when some
// were dropped (the message's node_count), 0 when all fit.
int32_t keepFirstPart(NodeList* nodes, size_t budget);

// The memberships a leader announced, by epoch: the last kKept of them.
class PublishedMembers {
 public:
  static constexpr size_t kKept = 4;

  explicit PublishedMembers(size_t part_bytes) : part_bytes_(part_bytes) {}

  // Records `nodes` as the membership of `epoch` (again: replaced).
  void publish(uint64_t epoch, const NodeList& nodes);
  // The nodes of `epoch` from index `first` on, within the part budget (at
  // least one). NOT_FOUND when that epoch is no longer kept, OUT_OF_RANGE
  // when `first` is past its end.
  StatusOr<v1::MembersResponse> part(uint64_t epoch, int64_t first) const;
  size_t partBytes() const { return part_bytes_; }

 private:
  const size_t part_bytes_;
  std::deque<std::pair<uint64_t, NodeList>> kept_;  // oldest first
};

// Follower: reads from the leader (Members calls through `stub`) the nodes
// of `epoch` that `nodes` lacks, until it holds `node_count`. DATA_LOSS
// when the leader's answers do not add up; the call's error otherwise.
Status readMembers(v1::Peer::StubInterface* stub, const std::string& job_id, const std::string& token, uint64_t epoch,
                   int32_t node_count, NodeList* nodes, std::chrono::system_clock::time_point deadline);

}  // namespace gradsync::peer
