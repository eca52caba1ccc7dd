// SPDX-License-Identifier: Apache-2.0
#include "tools/gradsyncctl/format.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace gradsync::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::GetStatusResponse makeStatus() {
  v1::GetStatusResponse status;
  status.set_version("0.1.0-test");
  status.set_uptime_seconds(3723.7);
  status.set_pid(4242);
  status.set_hostname("node-a");
  status.set_jobs(2);
  status.set_cuda_devices(1);
  v1::GpuInfo* gpu = status.add_gpus();
  gpu->set_index(0);
  gpu->set_uuid("GPU-8e0b1977-1fa4-2c3e-9100-abcdef012345");
  gpu->set_name("NVIDIA H100 80GB HBM3");
  gpu->set_total_memory_bytes(85ull << 30);
  gpu->set_compute_mode("default");
  gpu->set_pci_bus_id("0000:18:00.0");
  gpu->set_numa_node(1);
  v1::GpuPeerLink* nvlink = gpu->add_peers();
  nvlink->set_index(1);
  nvlink->set_access(true);
  nvlink->set_performance_rank(0);
  v1::GpuPeerLink* unreachable = gpu->add_peers();
  unreachable->set_index(2);
  unreachable->set_performance_rank(-1);
  status.set_cuda_driver_version(13000);
  status.set_mps(true);
  status.set_mps_pipe_directory("/tmp/nvidia-mps");
  status.set_nccl_version(22807);
  status.set_nccl_library("/opt/nccl/libnccl.so.2");
  v1::DaemonConfig* config = status.mutable_config();
  config->set_socket_path("/run/gradsync/gradsyncd.sock");
  config->set_handoff_socket_path("/run/gradsync/gradsyncd.sock.handoff");
  config->set_socket_mode(0660);
  config->set_log_level("info");
  config->set_socket_group("we\"ird\n");
  config->set_cycle_time_ms(1);
  config->set_fusion_threshold_bytes(64ull << 20);
  config->set_stall_warning_seconds(60);
  config->set_stall_deadline_seconds(0);  // zero must still be printed
  config->set_max_arena_bytes(64ull << 30);
  config->set_max_jobs(64);
  config->set_max_local_ranks(256);
  config->set_max_message_bytes(4u << 20);
  return status;
}

v1::ListJobsResponse makeJobs() {
  v1::ListJobsResponse jobs;
  v1::JobInfo* job = jobs.add_jobs();
  job->set_job_id("job-7f3a");
  job->set_size(8);
  job->set_local_size(2);
  job->set_healthy(false);
  job->set_tensors_in_flight(3);
  job->set_operations_done(12345);
  job->set_bytes_done(1610612736);  // 1.5 GiB
  job->set_errors(1);
  job->set_last_error("rank 5 (host node-b, pid 99) died");
  job->set_fused_responses(678);
  job->set_stall_warnings(9);
  v1::ProcessSetStatus* set = job->add_process_sets();
  set->set_id(3);
  set->add_ranks(0);
  set->add_ranks(5);
  v1::RankInfo* rank = job->add_ranks();
  rank->set_rank(4);
  rank->set_local_rank(0);
  rank->set_pid(1001);
  rank->set_hostname("node-a");
  rank->set_connected(true);
  rank->set_joined(false);
  rank->set_arena_bytes(256ull << 20);
  rank->set_gpu(3);
  rank->set_gpu_uuid("GPU-1234");
  rank->set_gpu_buffers(17);
  rank = job->add_ranks();
  rank->set_rank(5);
  rank->set_local_rank(1);
  rank->set_pid(1002);
  rank->set_hostname("node-a");
  rank->set_connected(false);
  rank->set_joined(true);
  rank->set_arena_bytes(512);
  return jobs;
}

TEST(FormatBytes, PicksBinaryUnits) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1024), "1.00 KiB");
  EXPECT_EQ(formatBytes(1536), "1.50 KiB");
  EXPECT_EQ(formatBytes(15ull << 20), "15.0 MiB");
  EXPECT_EQ(formatBytes(150ull << 30), "150 GiB");
  EXPECT_EQ(formatBytes(1610612736), "1.50 GiB");
  EXPECT_EQ(formatBytes((1ull << 20) - 1), "1.00 MiB");  // not "1024 KiB"
  EXPECT_EQ(formatBytes(UINT64_MAX), "16.0 EiB");
}

TEST(FormatDuration, HoursMinutesSeconds) {
  EXPECT_EQ(formatDuration(0), "0s");
  EXPECT_EQ(formatDuration(42.9), "42s");
  EXPECT_EQ(formatDuration(63), "1m 03s");
  EXPECT_EQ(formatDuration(3723.4), "1h 02m 03s");
  EXPECT_EQ(formatDuration(93784), "1d 02h 03m 04s");
  EXPECT_EQ(formatDuration(-5), "0s");
  EXPECT_EQ(formatDuration(std::nan("")), "0s");
}

TEST(FormatStatus, ShowsIdentityAndEveryConfigField) {
  std::string text = formatStatus(makeStatus(), "/tmp/x.sock");
  EXPECT_THAT(text, HasSubstr("0.1.0-test"));
  EXPECT_THAT(text, HasSubstr("1h 02m 03s"));
  EXPECT_THAT(text, HasSubstr("4242"));
  EXPECT_THAT(text, HasSubstr("node-a"));
  EXPECT_THAT(text, HasSubstr("/tmp/x.sock"));
  EXPECT_THAT(text, HasSubstr("gpus:         1\n"));
  EXPECT_THAT(text, HasSubstr("  0  GPU-8e0b1977-1fa4-2c3e-9100-abcdef012345  NVIDIA H100 80GB HBM3  85.0 GiB  "
                              "compute mode default  PCI 0000:18:00.0  NUMA 1\n"
                              "     peers: 1 direct, rank 0, 2 none\n"));
  EXPECT_THAT(text, HasSubstr("cuda driver:  13.0\n"));
  EXPECT_THAT(text, HasSubstr("mps:          on (/tmp/nvidia-mps)\n"));
  EXPECT_THAT(text, HasSubstr("2.28.7 (/opt/nccl/libnccl.so.2)"));
  EXPECT_THAT(text, HasSubstr("jobs:"));
  // Every DaemonConfig field appears by name, even those at zero or empty.
  const auto* descriptor = v1::DaemonConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    EXPECT_THAT(text, HasSubstr("\n  " + descriptor->field(i)->name() + ":")) << descriptor->field(i)->name();
  }
  EXPECT_THAT(text, HasSubstr("socket_group:"));
  EXPECT_THAT(text, HasSubstr("\"we\\\"ird\\012\""));  // escaped socket_group
  EXPECT_THAT(text, HasSubstr("432 (0660)"));
  EXPECT_THAT(text, HasSubstr("67108864 (64.0 MiB)"));
  EXPECT_THAT(text, HasSubstr("68719476736 (64.0 GiB)"));
  EXPECT_THAT(text, HasSubstr("\"/run/gradsync/gradsyncd.sock\""));
}

TEST(FormatStatus, SaysWhyThereAreNoGpus) {
  v1::GetStatusResponse status = makeStatus();
  status.clear_gpus();
  status.set_cuda_devices(0);
  status.set_cuda_driver_version(0);
  status.set_gpu_note("no CUDA driver (cudaErrorInsufficientDriver, 35)");
  status.set_mps(false);
  status.set_nccl_version(0);
  status.set_nccl_note("cannot load NCCL: libnccl.so.2: cannot open shared object file");
  std::string text = formatStatus(status, "/tmp/x.sock");
  EXPECT_THAT(text, HasSubstr("gpus:         none (no CUDA driver (cudaErrorInsufficientDriver, 35))\n"));
  EXPECT_THAT(text, Not(HasSubstr("cuda driver:")));
  EXPECT_THAT(text, HasSubstr("mps:          off\n"));
  EXPECT_THAT(text, HasSubstr("nccl:         unavailable (cannot load NCCL: libnccl.so.2"));
}

TEST(FormatConfig, EmptyConfigStillListsEveryField) {
  std::string text = formatConfig(v1::DaemonConfig());
  const auto* descriptor = v1::DaemonConfig::descriptor();
  int lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, descriptor->field_count());
  EXPECT_THAT(text, HasSubstr("socket_path:"));
  EXPECT_THAT(text, HasSubstr("\"\"\n"));    // empty strings are shown quoted
  EXPECT_THAT(text, HasSubstr("0 (0000)"));  // socket_mode
}

TEST(FormatJobs, ShowsCountersAndRankTable) {
  std::string text = formatJobs(makeJobs());
  for (const char* expected : {"job job-7f3a",
                               "8 / 2",
                               "healthy:",
                               "no",
                               "tensors in flight:",
                               "3",
                               "operations done:",
                               "12345",
                               "1610612736 (1.50 GiB)",
                               "fused responses:",
                               "678",
                               "errors:",
                               "rank 5 (host node-b, pid 99) died",
                               "stall warnings:",
                               "9",
                               "process sets:",
                               "3:[0,5]",
                               "RANK",
                               "LOCAL",
                               "PID",
                               "HOST",
                               "CONNECTED",
                               "JOINED",
                               "ARENA",
                               "GPU BUFFERS",
                               "3 (GPU-1234)",
                               "17",
                               "1001",
                               "1002",
                               "256 MiB",
                               "512 B"}) {
    EXPECT_THAT(text, HasSubstr(expected)) << expected;
  }
}

TEST(FormatJobs, ShowsFusionAndAutotune) {
  v1::ListJobsResponse jobs;
  v1::JobInfo* job = jobs.add_jobs();
  job->set_job_id("fixed");
  job->mutable_tuning()->set_fusion_threshold_bytes(64 << 20);
  job->mutable_tuning()->set_cycle_time_ms(1);
  std::string text = formatJobs(jobs);
  EXPECT_THAT(text, HasSubstr("fusion:             up to 64.0 MiB, cycle 1 ms\n"));
  EXPECT_THAT(text, HasSubstr("autotune:           off\n"));
  EXPECT_THAT(text, Not(HasSubstr("autotune trials")));

  v1::JobTuning* tuning = job->mutable_tuning();
  tuning->set_autotune(true);
  tuning->set_phase("tuning the fusion threshold");
  tuning->set_samples(12);
  tuning->set_samples_planned(53);
  auto* trial = tuning->add_trials();
  trial->set_fusion_threshold_bytes(64 << 20);
  trial->set_cycle_time_ms(1);
  trial->set_bytes_per_second(420e6);
  trial = tuning->add_trials();
  trial->set_fusion_threshold_bytes(1);
  trial->set_cycle_time_ms(1);
  trial->set_bytes_per_second(512.25e6);
  text = formatJobs(jobs);
  EXPECT_THAT(text, HasSubstr("autotune:           tuning the fusion threshold, sample 12 of 53\n"));
  EXPECT_THAT(text, HasSubstr("autotune trials"));
  EXPECT_THAT(text, HasSubstr("none      1 ms   512.2"));

  tuning->set_phase("done");
  tuning->set_samples(53);
  tuning->set_fusion_threshold_bytes(1);
  text = formatJobs(jobs);
  EXPECT_THAT(text, HasSubstr("fusion:             no fusion, cycle 1 ms\n"));
  EXPECT_THAT(text, HasSubstr("autotune:           done after 53 samples: 512 MB/s (the initial setting: 420 MB/s)\n"));

  // A follower: the leader tunes.
  tuning->Clear();
  tuning->set_autotune(true);
  tuning->set_phase("the leader tunes");
  tuning->set_fusion_threshold_bytes(16 << 20);
  text = formatJobs(jobs);
  EXPECT_THAT(text, HasSubstr("fusion:             up to 16.0 MiB (the leader's)\n"));
  EXPECT_THAT(text, HasSubstr("autotune:           the leader tunes\n"));
}

TEST(FormatJobs, RankTableColumnsLineUp) {
  std::string table = formatRankTable(makeJobs().jobs(0));
  // Header plus two ranks; each column starts at the same offset.
  size_t first_end = table.find('\n');
  std::string header = table.substr(0, first_end);
  std::string row = table.substr(first_end + 1, table.find('\n', first_end + 1) - first_end - 1);
  EXPECT_EQ(header.find("HOST"), row.find("node-a"));
  EXPECT_EQ(header.find("PID"), row.find("1001"));
  EXPECT_THAT(row, HasSubstr("yes"));
}

TEST(FormatJobs, EmptyListSaysSo) {
  EXPECT_EQ(formatJobs(v1::ListJobsResponse()), "no jobs\n");
  v1::ListJobsResponse jobs;
  jobs.add_jobs()->set_job_id("j");
  EXPECT_THAT(formatJobs(jobs), HasSubstr("last error:"));
  EXPECT_THAT(formatJobs(jobs), Not(HasSubstr("no jobs")));
}

template <typename M>
void expectJsonRoundTrip(const M& message, const std::string& json) {
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(json.back(), '\n');
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one line";
  M parsed;
  auto status = google::protobuf::util::JsonStringToMessage(json, &parsed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(message, parsed));
}

TEST(FormatJson, JobsAreValidJsonWithProtoFieldNames) {
  v1::ListJobsResponse jobs = makeJobs();
  StatusOr<std::string> json = formatJson(jobs);
  ASSERT_TRUE(json.isOk()) << json.status().toString();
  expectJsonRoundTrip(jobs, *json);
  for (const char* name : {"\"job_id\"", "\"local_size\"", "\"tensors_in_flight\"", "\"operations_done\"",
                           "\"bytes_done\"", "\"fused_responses\"", "\"last_error\"", "\"stall_warnings\"",
                           "\"healthy\"", "\"ranks\"", "\"local_rank\"", "\"arena_bytes\"", "\"joined\""}) {
    EXPECT_THAT(*json, HasSubstr(name)) << name;
  }
  EXPECT_THAT(*json, Not(HasSubstr("bytesDone")));
}

TEST(FormatJson, StatusPrintsZeroFields) {
  v1::GetStatusResponse status = makeStatus();
  StatusOr<std::string> json = formatJson(status);
  ASSERT_TRUE(json.isOk());
  expectJsonRoundTrip(status, *json);
  EXPECT_THAT(*json, HasSubstr("\"uptime_seconds\""));
  EXPECT_THAT(*json, HasSubstr("\"stall_deadline_seconds\":0"));
  EXPECT_THAT(*json, HasSubstr("\"reduce_threads\":0"));
}

TEST(FormatTest, MembersShowRolesHeartbeatsAndTraffic) {
  v1::ListJobsResponse jobs;
  v1::JobInfo* job = jobs.add_jobs();
  job->set_job_id("wide");
  job->set_size(2);
  job->set_local_size(1);
  job->set_epoch(1);
  v1::NodeStatus* self = job->add_nodes();
  self->set_cross_rank(0);
  self->set_self(true);
  self->set_leader(true);
  self->set_peer_address("10.0.0.1:7731");
  self->add_ranks(0);
  v1::NodeStatus* other = job->add_nodes();
  other->set_cross_rank(1);
  other->set_peer_address("10.0.0.2:7731");
  other->add_ranks(1);
  other->set_heartbeat_age_ms(250);
  other->set_bytes_sent(3 << 20);
  other->set_throughput_gbps(1.5);
  other->set_gpus(8);
  other->set_topology("rack-2/switch-1");
  job->set_nccl_id_digest("0123456789abcdef");
  const std::string text = formatMembers(jobs);
  EXPECT_THAT(text, HasSubstr("nccl id 0123456789abcdef"));
  EXPECT_THAT(text, HasSubstr("GPUS"));
  EXPECT_THAT(text, HasSubstr("job wide  epoch 1"));
  EXPECT_THAT(text, HasSubstr("0 (self)"));
  EXPECT_THAT(text, HasSubstr("leader"));
  EXPECT_THAT(text, HasSubstr("follower"));
  EXPECT_THAT(text, HasSubstr("10.0.0.2:7731"));
  EXPECT_THAT(text, HasSubstr("rack-2/switch-1"));
  EXPECT_THAT(text, HasSubstr("250 ms"));
  EXPECT_THAT(text, HasSubstr("3.00 MiB"));
  EXPECT_THAT(text, HasSubstr("1.50"));
}

}  // namespace
}  // namespace gradsync::ctl

namespace gradsync::ctl {
namespace {

TEST(FormatHistoryTest, ListsEveryEpochChangeOfElasticJobs) {
  v1::ListJobsResponse jobs;
  jobs.add_jobs()->set_job_id("static");  // not elastic: left out
  v1::JobInfo* job = jobs.add_jobs();
  job->set_job_id("el");
  job->set_elastic(true);
  job->set_min_size(2);
  job->set_epoch(2);
  v1::EpochChange* change = job->add_history();
  change->set_epoch(2);
  change->set_cause("rank 1 (pid 4242, host h) disconnected");
  change->set_size_before(3);
  change->set_size_after(2);
  change->set_unix_ms(1795000000000);  // 2026-11-18 11:06:40 UTC
  change->set_failed_collectives(4);
  change->set_recovery_ms(137);
  job->set_ended(true);
  const std::string text = formatHistory(jobs);
  EXPECT_EQ(text.find("static"), std::string::npos);
  for (const char* part : {"job el  epoch 2  min size 2  (ended)", "EPOCH", "2026-11-18 11:06:40", "3 -> 2", "4",
                           "137 ms", "rank 1 (pid 4242, host h) disconnected"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  }
  EXPECT_EQ(formatHistory(v1::ListJobsResponse()), "no elastic jobs\n");
}

}  // namespace
}  // namespace gradsync::ctl
