// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/request_wire.h"

namespace gradsync::coordinator {

v1::Enqueue enqueueOf(const Request& r) {
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
  e.set_abandoned(r.abandoned);
  for (int rank : r.set_ranks) e.add_process_set_ranks(rank);
  e.set_target_process_set(r.target_set);
  e.set_commit(r.commit);
  e.set_call(r.call);
  if (r.cuda_output) {
    e.mutable_cuda_output()->set_buffer_id(r.cuda_output->buffer_id);
    e.mutable_cuda_output()->set_offset(r.cuda_output->offset);
    e.set_output_length(r.output_length);
  }
  if (r.cuda) {
    e.mutable_cuda()->set_buffer_id(r.cuda->buffer_id);
    e.mutable_cuda()->set_offset(r.cuda->offset);
    e.mutable_cuda()->set_event_slot(r.cuda->event_slot);
  }
  return e;
}

Request requestOf(int rank, const v1::Enqueue& e) {
  Request r;
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
  r.abandoned = e.abandoned();
  r.set_ranks.assign(e.process_set_ranks().begin(), e.process_set_ranks().end());
  r.target_set = e.target_process_set();
  r.commit = e.commit() && e.type() == v1::BARRIER;
  r.call = e.call();
  if (e.has_cuda()) r.cuda = CudaRef{e.cuda().buffer_id(), e.cuda().offset(), e.cuda().event_slot()};
  if (e.has_cuda_output()) {
    r.cuda_output = CudaRef{e.cuda_output().buffer_id(), e.cuda_output().offset(), 0};
    r.output_length = e.output_length();
  }
  return r;
}

}  // namespace gradsync::coordinator
