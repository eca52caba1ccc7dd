// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpora of the fuzz targets under DIR/<target>/ (valid
// messages of each kind, so that fuzzing starts from the accepted paths):
//   bazel run //tests/fuzz:make_seeds -- $PWD/tests/fuzz/corpus
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "handoff/frame.h"
#include "handoff/shm_layout.h"
#include "proto/gradsync/v1/control.pb.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace {

std::string root;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = root + "/" + target;
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/seed-" + name, std::ios::binary) << bytes;
}

gradsync::v1::Enqueue allreduce(uint64_t handle, uint64_t offset) {
  gradsync::v1::Enqueue e;
  e.set_handle(handle);
  e.set_name("layer1.weight.grad");
  e.set_type(gradsync::v1::ALLREDUCE);
  e.set_dtype(gradsync::v1::FLOAT32);
  e.add_shape(16);
  e.add_shape(4);
  e.set_op(gradsync::v1::SUM);
  e.set_offset(offset);
  e.set_length(256);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gradsync;
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  root = argv[1];
  ::mkdir(root.c_str(), 0755);

  v1::Enqueue gather = allreduce(2, 512);
  gather.set_type(v1::ALLGATHER);
  gather.set_output_length(1024);
  v1::Enqueue alltoall = allreduce(3, 1024);
  alltoall.set_type(v1::ALLTOALL);
  for (int i = 0; i < 4; ++i) alltoall.add_splits(4);
  v1::Enqueue cuda = allreduce(4, 0);
  cuda.mutable_cuda()->set_buffer_id(7);
  for (const auto& [name, e] : {std::pair<std::string, v1::Enqueue>{"allreduce", allreduce(1, 0)},
                                {"allgather", gather},
                                {"alltoall", alltoall},
                                {"cuda", cuda}}) {
    write("enqueue_fuzz", name, std::string(1, '\x04') + e.SerializeAsString());
  }

  // Two ring records, then an index pair that claims more than was written.
  std::string ring(8, '\0');
  const uint32_t tail = 2;
  ring.replace(0, 4, reinterpret_cast<const char*>(&tail), 4);
  for (const auto& e : {allreduce(1, 0), gather}) {
    const std::string bytes = e.SerializeAsString();
    const uint16_t length = static_cast<uint16_t>(bytes.size());
    ring += std::string(reinterpret_cast<const char*>(&length), 2) + bytes;
  }
  write("handoff_ring_fuzz", "two-records", ring);

  v1::HandoffRequest attach;
  attach.mutable_cuda_attach()->set_device_uuid("GPU-00000000-0000-0000-0000-000000000000");
  attach.mutable_cuda_attach()->add_ready_events(std::string(64, '\x01'));
  v1::HandoffRequest release;
  release.mutable_buffer_release()->set_buffer_id(7);
  write("handoff_frame_fuzz", "attach", handoff::encodeFrame(attach));
  write("handoff_frame_fuzz", "release", handoff::encodeFrame(release));

  v1::JoinJobRequest join;
  join.set_job_id("job");
  join.set_size(8);
  for (int r = 1; r < 8; ++r) join.mutable_node()->add_ranks(r);
  join.mutable_node()->set_peer_address("127.0.0.1:4000");
  write("peer_message_fuzz", "join", std::string(1, '\0') + join.SerializeAsString());
  v1::LeaderMessage batch;
  auto* full = batch.mutable_batch()->add_responses();
  full->set_cache_id(1);
  full->set_name("layer1.weight.grad");
  auto* cached = batch.mutable_batch()->add_responses();
  cached->set_cache_id(1);
  cached->set_cached(true);
  write("peer_message_fuzz", "batch", std::string(1, '\x01') + batch.SerializeAsString());
  v1::FollowerMessage forward;
  forward.mutable_request()->set_rank(3);
  *forward.mutable_request()->mutable_enqueue() = allreduce(9, 0);
  write("peer_message_fuzz", "forward", std::string(1, '\x02') + forward.SerializeAsString());

  write("config_fuzz", "text",
        "socket_path: \"/run/gradsync/gradsyncd.sock\"\nreduce_threads: 4\n"
        "peer_address: \"0.0.0.0:7070\"\nlog_level: \"info\"\n");
  write("config_fuzz", "json", "{\"socketPath\": \"/tmp/g.sock\", \"maxArenaBytes\": \"1073741824\"}");

  v1::RegisterRequest reg;
  reg.set_job_id("job");
  reg.set_token("token");
  reg.set_rank(0);
  reg.set_size(2);
  reg.set_local_rank(0);
  reg.set_local_size(2);
  reg.add_process_sets()->add_ranks(0);
  reg.set_hostname("host");
  write("register_fuzz", "rank0", reg.SerializeAsString());
  return 0;
}
