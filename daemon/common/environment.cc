// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/environment.h"

#include <cstdlib>

namespace gradsync::environment {
namespace {

std::string text(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool set(const char* name) { return std::getenv(name) != nullptr; }

}  // namespace

std::string ncclLibrary() { return text("GRADSYNC_NCCL_LIBRARY"); }

std::string journalStream() { return text("JOURNAL_STREAM"); }

std::string journalSocket() { return text("GRADSYNC_JOURNAL_SOCKET"); }

std::string mpsPipeDirectory() {
  const std::string dir = text("CUDA_MPS_PIPE_DIRECTORY");
  return dir.empty() ? "/tmp/nvidia-mps" : dir;
}

bool ucxSetsTcpSegments() { return set("UCX_TCP_TX_SEG_SIZE") || set("UCX_TCP_RX_SEG_SIZE"); }

}  // namespace gradsync::environment
