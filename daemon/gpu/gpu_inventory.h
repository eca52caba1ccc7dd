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

// How this GPU reaches another of the node's directly (CUDA peer access).
struct GpuPeerLink {
  int index = 0;              // the other GPU's ordinal
  bool access = false;        // peer access possible (NVLink or PCIe P2P)
  int performance_rank = -1;  // the driver's relative rank of the link (lower: faster; NVLink is usually 0)
  bool native_atomics = false;
};

struct GpuInfo {
  int index = 0;     // CUDA ordinal in this process
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it
  std::string name;  // "NVIDIA H100 80GB HBM3"
  uint64_t total_memory_bytes = 0;
  std::string compute_mode;        // "default", "exclusive-process", "prohibited"
  std::string pci_bus_id;          // "0000:18:00.0"
  int numa_node = -1;              // the host NUMA node of its PCI device (-1: unknown)
  std::vector<GpuPeerLink> peers;  // one per other GPU of the node
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string note;        // why there are none, e.g. "no CUDA driver (cudaErrorInsufficientDriver, 35)"
  int driver_version = 0;  // e.g. 13000; 0 without a driver
  bool mps = false;        // an MPS control daemon answers on this node
  std::string mps_pipe;    // where it was found (CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps)
};

GpuInventory probeGpus();

// The NUMA node of the PCI device `pci_bus_id` ("0000:18:00.0", any case)
// as `sysfs` (normally "/sys") tells it; -1 when it does not.
int numaNodeOf(const std::string& pci_bus_id, const std::string& sysfs = "/sys");

}  // namespace gradsync::gpu
