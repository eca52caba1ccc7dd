// SPDX-License-Identifier: Apache-2.0
// Wire conversions of negotiated collectives (peer.proto <-> coordinator).
#include "daemon/peer/cross_node.h"

namespace gradsync::peer {

v1::NegotiatedResponse toProto(const coordinator::Response& response) {
  v1::NegotiatedResponse out;
  out.set_name(response.name);
  out.set_type(response.type);
  out.set_process_set_id(response.process_set_id);
  for (size_t i = 0; i < response.ranks.size(); ++i) {
    out.add_ranks(response.ranks[i]);
    auto* r = out.add_requests();
    r->set_rank(response.ranks[i]);
    r->set_present(response.requests[i].has_value());
    if (response.requests[i]) *r->mutable_enqueue() = coordinator::enqueueOf(*response.requests[i]);
  }
  out.set_code(static_cast<int>(response.status.code()));
  out.set_message(response.status.message());
  out.set_last_joined_rank(response.last_joined_rank);
  out.set_changed_process_set(response.changed_process_set);
  out.set_admits_joiners(response.admits_joiners);
  return out;
}

coordinator::Response fromProto(const v1::NegotiatedResponse& in) {
  coordinator::Response out;
  out.name = in.name();
  out.type = in.type();
  out.process_set_id = in.process_set_id();
  for (const auto& r : in.requests()) {
    out.ranks.push_back(r.rank());
    if (r.present()) {
      out.requests.push_back(coordinator::requestOf(r.rank(), r.enqueue()));
    } else {
      out.requests.emplace_back();
    }
  }
  out.status = Status(static_cast<StatusCode>(in.code()), in.message());
  out.last_joined_rank = in.last_joined_rank();
  out.changed_process_set = in.changed_process_set();
  out.admits_joiners = in.admits_joiners();
  return out;
}

}  // namespace gradsync::peer
