// SPDX-License-Identifier: Apache-2.0
// Pure functions turning Admin responses into the text gradsyncctl prints.
// No I/O here, so every output format is unit-tested (format_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "proto/gradsync/v1/admin.pb.h"

namespace google::protobuf {
class Message;
}  // namespace google::protobuf

namespace gradsync::ctl {

// 1536 -> "1.50 KiB"; below 1 KiB the exact count: 512 -> "512 B".
std::string formatBytes(uint64_t bytes);

// 3723.4 -> "1h 02m 03s"; 93784 -> "1d 02h 03m 04s"; 42.9 -> "42s".
// Negative or non-finite durations read as "0s".
std::string formatDuration(double seconds);

// Every DaemonConfig field, one "  name: value" line each, in field order,
// zero values included (proto3 text format would hide them). Fields ending
// in _bytes get human units; socket_mode is shown in octal too.
std::string formatConfig(const v1::DaemonConfig& config);

// The `gradsyncctl status` text. `socket_path` is the socket the CLI used.
std::string formatStatus(const v1::GetStatusResponse& status, const std::string& socket_path);

// The rank table of one job: a header line, then one line per rank.
std::string formatRankTable(const v1::JobInfo& job);

// The `gradsyncctl jobs` text: one block per job, "no jobs" when empty.
std::string formatJobs(const v1::ListJobsResponse& jobs);

// The nodes of every multi-node job: cross rank, role, address, host, ranks,
// heartbeat age.
std::string formatMembers(const v1::ListJobsResponse& jobs);
// The epochs of elastic jobs: when, why, size before and after.
std::string formatHistory(const v1::ListJobsResponse& jobs);

// Per job, the collectives in negotiation: name, age, ranks that submitted
// and ranks missing; "no jobs" when empty.
std::string formatTensors(const v1::ListTensorsResponse& tensors);

// The message as one line of JSON (proto field names, zero values included),
// followed by a newline.
StatusOr<std::string> formatJson(const google::protobuf::Message& message);

}  // namespace gradsync::ctl
