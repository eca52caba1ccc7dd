// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/membership_parts.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/client_context.h>

#include <algorithm>
#include <string>

namespace gradsync::peer {
namespace {

// Bytes a node adds to a repeated field numbered below 16: tag, length, body.
size_t elementBytes(const v1::NodeInfo& node) {
  const size_t size = node.ByteSizeLong();
  return 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size;
}

// How many of nodes[first..] fit in `budget` bytes (at least one).
int countWithin(const NodeList& nodes, int first, size_t budget) {
  size_t used = 0;
  int count = 0;
  for (int i = first; i < nodes.size(); ++i, ++count) {
    used += elementBytes(nodes.Get(i));
    if (used > budget && count > 0) break;
  }
  return count;
}

// More nodes than any job can have: a larger node_count is not believed.
constexpr int32_t kMaxNodes = 1 << 20;

}  // namespace

int32_t keepFirstPart(NodeList* nodes, size_t budget) {
  const int whole = nodes->size();
  const int kept = countWithin(*nodes, 0, budget);
  if (kept == whole) return 0;
  nodes->DeleteSubrange(kept, whole - kept);
  return whole;
}

void PublishedMembers::publish(uint64_t epoch, const NodeList& nodes) {
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const auto& e) { return e.first == epoch; });
  if (it != kept_.end()) kept_.erase(it);
  kept_.emplace_back(epoch, nodes);
  while (kept_.size() > kKept) kept_.pop_front();
}

StatusOr<v1::MembersResponse> PublishedMembers::part(uint64_t epoch, int64_t first) const {
  if (kept_.empty()) return notFound("this daemon announced no membership (it does not lead the job)");
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const auto& e) { return e.first == epoch; });
  if (it == kept_.end()) {
    return notFound("the membership of epoch " + std::to_string(epoch) + " is no longer kept (the job is at epoch " +
                    std::to_string(kept_.back().first) + ")");
  }
  const NodeList& nodes = it->second;
  if (first < 0 || first >= nodes.size()) {
    return outOfRange("node " + std::to_string(first) + " of a membership of " + std::to_string(nodes.size()) +
                      " nodes (epoch " + std::to_string(epoch) + ")");
  }
  v1::MembersResponse response;
  const int count = countWithin(nodes, static_cast<int>(first), part_bytes_);
  for (int i = 0; i < count; ++i) *response.add_nodes() = nodes.Get(static_cast<int>(first) + i);
  return response;
}

Status readMembers(v1::Peer::StubInterface* stub, const std::string& job_id, const std::string& token, uint64_t epoch,
                   int32_t node_count, NodeList* nodes, std::chrono::system_clock::time_point deadline) {
  const std::string what = "the membership of epoch " + std::to_string(epoch) + " (" + std::to_string(node_count) +
                           " nodes, " + std::to_string(nodes->size()) + " in its announcement)";
  if (node_count < nodes->size() || node_count > kMaxNodes) return dataLoss(what + " does not add up");
  v1::MembersRequest request;
  request.set_job_id(job_id);
  request.set_token(token);
  request.set_epoch(epoch);
  while (nodes->size() < node_count) {
    request.set_first(nodes->size());
    grpc::ClientContext context;
    context.set_deadline(deadline);
    v1::MembersResponse response;
    const grpc::Status status = stub->Members(&context, request, &response);
    if (!status.ok()) {
      return Status(
          static_cast<StatusCode>(status.error_code()),
          "reading " + what + " from node " + std::to_string(nodes->size()) + " on: " + status.error_message());
    }
    if (response.nodes_size() == 0 || nodes->size() + response.nodes_size() > node_count) {
      return dataLoss(what + ": the leader answered " + std::to_string(response.nodes_size()) + " nodes from node " +
                      std::to_string(nodes->size()) + " on");
    }
    for (auto& node : *response.mutable_nodes()) *nodes->Add() = std::move(node);
  }
  return okStatus();
}

}  // namespace gradsync::peer
