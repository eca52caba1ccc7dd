// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/request_batch.h"

#include <utility>

namespace gradsync::peer {

void RequestBatch::add(v1::FollowerMessage::Request request) {
  auto* requests = message_.mutable_requests()->mutable_requests();
  const int rank = request.rank();
  auto last = last_of_rank_.find(rank);
  if (request.cache_id() != 0 && request.same_ranks().empty()) {
    auto latest = latest_.find({request.cache_id(), request.epoch(), request.call()});
    if (latest != latest_.end() && (last == last_of_rank_.end() || last->second < latest->second)) {
      requests->Mutable(latest->second)->add_same_ranks(rank);
      last_of_rank_[rank] = latest->second;
      bytes_ += 5;
      return;
    }
  }
  const int index = requests->size();
  if (request.cache_id() != 0) latest_[{request.cache_id(), request.epoch(), request.call()}] = index;
  last_of_rank_[rank] = index;
  bytes_ += request.ByteSizeLong();
  *requests->Add() = std::move(request);
}

v1::FollowerMessage RequestBatch::take() {
  v1::FollowerMessage out = std::move(message_);
  message_.Clear();
  bytes_ = 0;
  latest_.clear();
  last_of_rank_.clear();
  return out;
}

}  // namespace gradsync::peer
