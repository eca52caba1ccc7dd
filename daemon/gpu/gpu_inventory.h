// SPDX-License-Identifier: Apache-2.0
// The node's GPUs as the CUDA runtime (linked statically) reports them. No
// GPU, or no driver at all, is a normal state: an empty list with a note
// saying why, never an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/gpu_uuid.h"

namespace gradsync::gpu {

struct GpuInfo {
  int index = 0;     // CUDA ordinal in this process
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it
  std::string name;  // "NVIDIA H100 80GB HBM3"
  uint64_t total_memory_bytes = 0;
  std::string compute_mode;  // "default", "exclusive-process", "prohibited"
  std::string pci_bus_id;    // "0000:18:00.0"
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string note;        // why there are none, e.g. "no CUDA driver (cudaErrorInsufficientDriver, 35)"
  int driver_version = 0;  // e.g. 13000; 0 without a driver
  bool mps = false;        // an MPS control daemon answers on this node
  std::string mps_pipe;    // where it was found (CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps)
};

GpuInventory probeGpus();

}  // namespace gradsync::gpu
