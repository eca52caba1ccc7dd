// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/gpu_inventory.h"

#include <cuda_runtime_api.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "daemon/common/environment.h"

namespace gradsync::gpu {
namespace {

std::string computeModeName(int mode) {
  switch (mode) {
    case cudaComputeModeDefault:
      return "default";
    case cudaComputeModeExclusiveProcess:
      return "exclusive-process";
    case cudaComputeModeProhibited:
      return "prohibited";
    default:
      return "mode " + std::to_string(mode);
  }
}

std::string whyNone(cudaError_t err, int driver_version) {
  const std::string code = std::string(cudaGetErrorName(err)) + ", " + std::to_string(static_cast<int>(err));
  switch (err) {
    case cudaErrorNoDevice:
      return "no CUDA device (" + code + ")";
    case cudaErrorInsufficientDriver:
      return driver_version <= 0 ? "no CUDA driver (" + code + ")" : "CUDA driver too old (" + code + ")";
    case cudaErrorStubLibrary:
      return "the CUDA driver stub library was loaded instead of a driver (" + code + ")";
    default:
      return std::string(cudaGetErrorString(err)) + " (" + code + ")";
  }
}

// MPS: a control daemon listens on a named pipe in its pipe directory.
void probeMps(GpuInventory* inventory) {
  inventory->mps_pipe = environment::mpsPipeDirectory();
  struct stat st {};
  inventory->mps = ::stat((inventory->mps_pipe + "/control").c_str(), &st) == 0;
}

// Every pair of GPUs: can they reach each other directly, and how well.
void probePeers(GpuInventory* inventory) {
  for (GpuInfo& gpu : inventory->gpus) {
    for (const GpuInfo& other : inventory->gpus) {
      if (other.index == gpu.index) continue;
      GpuPeerLink link;
      link.index = other.index;
      int value = 0;
      link.access = cudaDeviceCanAccessPeer(&value, gpu.index, other.index) == cudaSuccess && value != 0;
      if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrPerformanceRank, gpu.index, other.index) == cudaSuccess) {
        link.performance_rank = value;
      }
      link.native_atomics = cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, gpu.index,
                                                      other.index) == cudaSuccess &&
                            value != 0;
      gpu.peers.push_back(link);
    }
  }
  (void)cudaGetLastError();  // a refused query leaves no sticky error behind
}

}  // namespace

int numaNodeOf(const std::string& pci_bus_id, const std::string& sysfs) {
  if (pci_bus_id.empty() || pci_bus_id.find('/') != std::string::npos) return -1;
  std::string lower = pci_bus_id;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream in(sysfs + "/bus/pci/devices/" + lower + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node < 0 ? -1 : node;
}

GpuInventory probeGpus() {
  GpuInventory inventory;
  probeMps(&inventory);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) inventory.driver_version = driver;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error
    inventory.note = whyNone(err, driver);
    return inventory;
  }
  if (count == 0) inventory.note = "no CUDA device";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const cudaError_t perr = cudaGetDeviceProperties(&prop, i);
    if (perr != cudaSuccess) {
      inventory.note += (inventory.note.empty() ? "" : "; ") + std::string("device ") + std::to_string(i) + ": " +
                        cudaGetErrorString(perr);
      continue;
    }
    GpuInfo info;
    info.index = i;
    info.uuid = formatGpuUuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
    info.name = prop.name;
    info.total_memory_bytes = prop.totalGlobalMem;
    int mode = 0;
    if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, i) == cudaSuccess)
      info.compute_mode = computeModeName(mode);
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) info.pci_bus_id = bus;
    info.numa_node = numaNodeOf(info.pci_bus_id);
    inventory.gpus.push_back(std::move(info));
  }
  probePeers(&inventory);
  return inventory;
}

}  // namespace gradsync::gpu
