// SPDX-License-Identifier: Apache-2.0
// Every environment variable the daemon reads, read here and nowhere else
// (its settings come from its config file and flags, daemon/exe/options.h;
// these are what the system around it says).
#pragma once

#include <string>

namespace gradsync::environment {

// GRADSYNC_NCCL_LIBRARY: the libnccl to load ("": the loader's search).
std::string ncclLibrary();
// JOURNAL_STREAM: systemd's device:inode of the journal stream it gave this
// process as stderr ("": not under systemd).
std::string journalStream();
// GRADSYNC_JOURNAL_SOCKET: the journal's socket instead of systemd's (tests;
// "": systemd's).
std::string journalSocket();
// CUDA_MPS_PIPE_DIRECTORY: where an MPS control daemon listens (unset or
// empty: MPS's default, /tmp/nvidia-mps).
std::string mpsPipeDirectory();
// UCX_TCP_TX_SEG_SIZE or UCX_TCP_RX_SEG_SIZE is set: the operator sized
// UCX's tcp segments, and the daemon's data_plane_tcp_segment_bytes yields.
bool ucxSetsTcpSegments();

}  // namespace gradsync::environment
