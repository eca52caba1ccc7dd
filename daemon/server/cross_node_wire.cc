// SPDX-License-Identifier: Apache-2.0
// Wire conversions of negotiated collectives (peer.proto <-> coordinator).
#include "daemon/server/cross_node.h"

namespace gradsync::server {

v1::Enqueue enqueueOf(const coordinator::Request& r) {
  v1::Enqueue e;
  e.set_handle(r.handle);
  e.set_name(r.name);
  e.set_type(r.type);
  e.set_dtype(r.dtype);
  for (int64_t d : r.shape) e.add_shape(d);
  e.set_op(r.op);
  e.set_prescale(r.prescale);
  e.set_postscale(r.postscale);
  e.set_root_rank(r.root_rank);
  e.set_process_set_id(r.process_set_id);
  for (int64_t s : r.splits) e.add_splits(s);
  e.set_offset(r.offset);
  e.set_length(r.length);
  e.set_group_id(r.group_id);
  e.set_group_size(r.group_size);
  return e;
}

coordinator::Request requestOf(int rank, const v1::Enqueue& e) {
  coordinator::Request r;
  r.rank = rank;
  r.handle = e.handle();
  r.name = e.name();
  r.type = e.type();
  r.dtype = e.dtype();
  r.shape.assign(e.shape().begin(), e.shape().end());
  r.op = e.op();
  r.prescale = e.prescale() == 0 ? 1.0 : e.prescale();
  r.postscale = e.postscale() == 0 ? 1.0 : e.postscale();
  r.root_rank = e.root_rank();
  r.process_set_id = e.process_set_id();
  r.splits.assign(e.splits().begin(), e.splits().end());
  r.offset = e.offset();
  r.length = e.length();
  r.group_id = e.group_id();
  r.group_size = e.group_size();
  return r;
}

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
    if (response.requests[i]) *r->mutable_enqueue() = enqueueOf(*response.requests[i]);
  }
  out.set_code(static_cast<int>(response.status.code()));
  out.set_message(response.status.message());
  out.set_last_joined_rank(response.last_joined_rank);
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
      out.requests.push_back(requestOf(r.rank(), r.enqueue()));
    } else {
      out.requests.emplace_back();
    }
  }
  out.status = Status(static_cast<StatusCode>(in.code()), in.message());
  out.last_joined_rank = in.last_joined_rank();
  return out;
}

}  // namespace gradsync::server
