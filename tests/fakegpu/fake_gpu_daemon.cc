// SPDX-License-Identifier: Apache-2.0
// gradsyncd over one fake GPU, for end-to-end tests of the CUDA path on
// machines without one: clients' "device memory" (fake_libcuda.cc) is mapped
// through /proc/<pid>/fd/<fd>, collectives run on it with the CPU kernels
// (FakeDeviceOps). Everything else is the real daemon.
// GRADSYNC_FAKE_GPU_FAIL_REDUCE_AT=N fails this daemon's N-th reduction on a
// GPU (a local failure before any step among the daemons).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "daemon/exe/daemon_main.h"
#include "daemon/gpu/fake_device_ops.h"
#include "daemon/gpu/gpu_node.h"
#include "tests/fakegpu/fake_ipc.h"

namespace gradsync::fakegpu {
namespace {

class FakeProcessGpu : public gpu::FakeDeviceOps, public gpu::GpuBackend {
 public:
  // `streams_never_drain`: a job's stream is never released (as a GPU
  // stream stuck behind a kernel that never ends would hold its teardown),
  // for tests of the daemon's way out of a shutdown that does not finish.
  FakeProcessGpu(bool streams_never_drain, int fail_reduce_at)
      : streams_never_drain_(streams_never_drain), fail_reduce_at_(fail_reduce_at) {}
  Status reduce(const cuda::LocalReduceArgs& args, void* stream) override {
    if (++reductions_ == fail_reduce_at_) {
      return internalError("fake GPU: injected failure of reduction " + std::to_string(reductions_) +
                           " (GRADSYNC_FAKE_GPU_FAIL_REDUCE_AT)");
    }
    return gpu::FakeDeviceOps::reduce(args, stream);
  }
  Status releaseStream(int device, void* stream) override {
    if (!streams_never_drain_) return gpu::FakeDeviceOps::releaseStream(device, stream);
    std::fprintf(stderr, "fake GPU: stream %p on device %d never drains\n", stream, device);
    std::fflush(stderr);
    for (;;) ::pause();
  }
  StatusOr<gpu::MappedMemory> openMemory(int device, const std::string& handle) override {
    Handle h{};
    if (handle.size() < sizeof(h)) return invalidArgument("fake IPC handle too short");
    std::memcpy(&h, handle.data(), sizeof(h));
    if (std::memcmp(h.magic, kHandleMagic, sizeof(h.magic)) != 0) return invalidArgument("not a fake IPC handle");
    const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return unavailable("cannot open " + path + ": " + std::strerror(errno));
    const off_t size = ::lseek(fd, 0, SEEK_END);
    void* p =
        size > 0 ? ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    ::close(fd);
    if (p == MAP_FAILED) return internalError("cannot map " + path);
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = static_cast<size_t>(size);
    return gpu::MappedMemory{p, static_cast<uint64_t>(size)};  // the true size, as the driver reports it
  }
  // cuMem chunks: each "exported handle" is the memfd of a chunk, mapped
  // back to back in one reserved range, as the driver does.
  StatusOr<gpu::MappedMemory> openChunks(int device, std::vector<UniqueFd> fds,
                                         const std::vector<uint64_t>& chunk_bytes) override {
    uint64_t total = 0;
    for (uint64_t bytes : chunk_bytes) total += bytes;
    void* base = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return resourceExhausted("cannot reserve " + std::to_string(total) + " bytes");
    uint64_t offset = 0;
    for (size_t i = 0; i < fds.size(); ++i) {
      struct stat st {};
      // A chunk smaller than stated fails, as cuMemMap would (no SIGBUS later).
      if (::fstat(fds[i].get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < chunk_bytes[i] ||
          ::mmap(static_cast<uint8_t*>(base) + offset, chunk_bytes[i], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 fds[i].get(), 0) == MAP_FAILED) {
        ::munmap(base, total);
        return invalidArgument("fake cuMemMap of chunk " + std::to_string(i) + " failed");
      }
      offset += chunk_bytes[i];
    }
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[base] = total;
    return gpu::MappedMemory{base, total};
  }
  Status closeMemory(int device, void* address) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(address);
    if (it == sizes_.end()) return internalError("unmapping an unknown address");
    ::munmap(address, it->second);
    sizes_.erase(it);
    return okStatus();
  }
  StatusOr<void*> openEvent(int device, const std::string& handle) override { return nextEvent(); }
  StatusOr<gpu::SharedEvent> createSharedEvent(int device) override {
    void* event = nextEvent();
    std::string handle(gpu::kIpcHandleBytes, '\0');
    std::memcpy(handle.data(), &event, sizeof(event));
    return gpu::SharedEvent{event, handle};
  }
  void destroyEvent(int device, void* event) override {}
  StatusOr<void*> createEvent(int device) override { return nextEvent(); }
  // Everything runs at once here: nothing can still use the mapping.
  void closeWhenIdle(int device, void* address, void* last_use, const std::string& what) override {
    (void)closeMemory(device, address);
  }

 private:
  void* nextEvent() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reinterpret_cast<void*>(next_event_++);
  }
  const bool streams_never_drain_;
  const int fail_reduce_at_;        // 0: never
  std::atomic<int> reductions_{0};  // so far
  std::mutex mutex_;
  std::map<void*, size_t> sizes_;
  uintptr_t next_event_ = 0x9000;
};

// GRADSYNC_FAKE_GPUS (default 1) fake GPUs, with the UUIDs the fake driver
// gives the clients' devices.
std::unique_ptr<gpu::GpuNode> fakeGpus(gpu::GpuInventory* inventory) {
  const char* wanted = std::getenv("GRADSYNC_FAKE_GPUS");
  const int count = std::clamp(wanted != nullptr ? std::atoi(wanted) : 1, 1, kMaxDevices);
  inventory->gpus.clear();
  for (int d = 0; d < count; ++d) {
    gpu::GpuInfo info;
    info.index = d;
    info.uuid = uuidText(d);
    info.name = "fake GPU (host memory, tests only)";
    info.total_memory_bytes = uint64_t{1} << 30;
    info.compute_mode = "default";
    inventory->gpus.push_back(info);
  }
  inventory->note.clear();
  const bool never_drain = std::getenv("GRADSYNC_FAKE_GPU_STREAMS_NEVER_DRAIN") != nullptr;
  const char* fail_reduce_at = std::getenv("GRADSYNC_FAKE_GPU_FAIL_REDUCE_AT");
  return gpu::GpuNode::withBackend(
      inventory->gpus,
      std::make_unique<FakeProcessGpu>(never_drain, fail_reduce_at != nullptr ? std::atoi(fail_reduce_at) : 0));
}

}  // namespace
}  // namespace gradsync::fakegpu

int main(int argc, char** argv) { return gradsync::exe::daemonMain(argc, argv, gradsync::fakegpu::fakeGpus); }
