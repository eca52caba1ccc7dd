// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/done_messages.h"

namespace gradsync::server {

v1::DaemonMessage doneMessage(const std::string& job_id, const coordinator::Request& request, const Status& status,
                              bool membership_changed) {
  v1::DaemonMessage message;
  v1::Done* done = message.mutable_done();
  done->set_handle(request.handle);
  done->set_code(static_cast<int>(status.code()));
  done->set_message(status.message());
  if (!status.isOk()) {
    done->mutable_detail()->set_job_id(job_id);
    done->mutable_detail()->set_tensor_name(request.name);
    done->mutable_detail()->set_membership_changed(membership_changed);
  }
  return message;
}

v1::DaemonMessage responseDone(const std::string& job_id, const coordinator::Response& response,
                               const executor::ResponseResult& result, size_t i, bool retriable, bool epoch_changed) {
  const coordinator::Request& request = *response.requests[i];
  v1::DaemonMessage message = doneMessage(job_id, request, result.status, !result.status.isOk() && retriable);
  v1::Done* done = message.mutable_done();
  if (!result.status.isOk()) {
    done->mutable_detail()->set_tensor_name(response.name);
    for (int rank : response.ranks) done->mutable_detail()->add_ranks(rank);
  }
  if (i < result.members.size()) {
    for (int64_t d : result.members[i].output_shape) done->add_output_shape(d);
    for (int64_t s : result.members[i].received_splits) done->add_received_splits(s);
  }
  done->set_last_joined_rank(response.last_joined_rank);
  if (response.type == v1::PROCESS_SET_ADD) done->set_process_set_id(response.changed_process_set);
  done->set_epoch_changed(epoch_changed);
  return message;
}

v1::DaemonMessage tuningSample(const autotune::TuningEvent& event) {
  v1::DaemonMessage message;
  v1::AutotuneSample* sample = message.mutable_autotune_sample();
  sample->set_fusion_threshold_bytes(event.settings.fusion_threshold_bytes);
  sample->set_cycle_time_ms(static_cast<double>(event.settings.cycle_time.count()) / 1000.0);
  sample->set_bytes_per_second(event.bytes_per_second);
  sample->set_phase(event.phase);
  return message;
}

}  // namespace gradsync::server
