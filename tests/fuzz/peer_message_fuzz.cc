// SPDX-License-Identifier: Apache-2.0
// What a daemon does with the peer service's messages from another node
// (authenticated, but possibly buggy or of another version): the leader
// adds a JoinJob's node to the membership and expands a follower's cached
// request; a follower decodes the leader's batches through its response
// cache. The first byte picks the message; the rest is its serialized form.
#include "daemon/coordinator/request_wire.h"
#include "daemon/membership/builder.h"
#include "daemon/peer/coordination_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 3;
  const void* bytes = data + 1;
  const int length = static_cast<int>(size - 1);
  if (kind == 0) {
    v1::JoinJobRequest join;
    if (!join.ParseFromArray(bytes, length)) return 0;
    membership::MembershipBuilder builder("fuzz", 8);
    v1::NodeInfo self;
    self.add_ranks(0);
    (void)builder.add(self);
    (void)builder.add(join.node());
    (void)builder.add(join.node());  // the same node twice is refused, not double-counted
    if (builder.complete()) (void)builder.ordered();
    (void)builder.missingRanks();
  } else if (kind == 1) {
    v1::LeaderMessage message;
    if (!message.ParseFromArray(bytes, length)) return 0;
    peer::CoordinationCodec follower("fuzz", 4);
    for (const auto& wire : message.batch().responses()) (void)follower.decode(wire);
  } else {
    v1::FollowerMessage message;
    if (!message.ParseFromArray(bytes, length) || !message.has_request()) return 0;
    peer::CoordinationCodec leader("fuzz", 4);
    const auto& request = message.request();
    const coordinator::Request forwarded = coordinator::requestOf(request.rank(), request.enqueue());
    coordinator::Response response;
    response.name = forwarded.name;
    response.ranks = {forwarded.rank};
    response.requests.push_back(forwarded);
    (void)leader.encode(response);
    (void)leader.expand(request);
    (void)leader.cachedId(forwarded);
  }
  return 0;
}
