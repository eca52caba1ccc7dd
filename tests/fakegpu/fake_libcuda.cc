// SPDX-License-Identifier: Apache-2.0
// A stand-in for the CUDA driver (libcuda.so.1) for tests on machines
// without a GPU: the client library finds it exactly as it finds the real
// one (dlopen RTLD_NOLOAD + cuGetProcAddress_v2) once a test process has
// loaded it. "Device memory" comes from gradsync_fake_cuda_malloc: memfd
// pages mapped shared, exportable to the fake daemon (fake_gpu_daemon.cc);
// or, as cuMem memory (PyTorch's expandable segments), from
// gradsync_fake_cuda_malloc_vmm: a reserved range with a memfd mapped per
// chunk, each exportable by file descriptor, and remappable
// (gradsync_fake_cuda_remap) as an allocator that frees and maps again; or,
// as a cudaMallocAsync pool's, from gradsync_fake_cuda_malloc_pool: memory
// that exports neither way. Each device has its context (made current by
// cuCtxPushCurrent, where cuMemAlloc allocates). Streams and events do
// nothing: copies run at once, and the fake daemon runs everything at once.
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tests/fakegpu/fake_ipc.h"

namespace {

struct Allocation {
  uintptr_t base;
  size_t bytes;
  int fd;
  unsigned long long id;
  int device;
  bool pool = false;
};

// cuMem memory: one reserved range, a memfd mapped per chunk.
struct Chunk {
  int fd;
  unsigned long long block_id;
};
struct VmmRange {
  uintptr_t base;
  size_t bytes;
  size_t chunk;
  unsigned long long id;
  std::vector<Chunk> chunks;
};

std::mutex g_mutex;
std::vector<Allocation> g_allocations;
std::vector<VmmRange> g_ranges;
unsigned long long g_next_block = 1000;
unsigned long long g_next_id = 1;
uintptr_t g_next_event = 0x7000;
// Device d's context is 0xC0 + d.
CUcontext contextOf(int device) { return reinterpret_cast<CUcontext>(0xC0 + static_cast<uintptr_t>(device)); }
thread_local int t_device = 0;  // the current context's device

const Allocation* find(uintptr_t p) {
  for (const auto& a : g_allocations) {
    if (p >= a.base && p < a.base + a.bytes) return &a;
  }
  return nullptr;
}

VmmRange* findRange(uintptr_t p) {
  for (auto& r : g_ranges) {
    if (p >= r.base && p < r.base + r.bytes) return &r;
  }
  return nullptr;
}

// A fresh memfd chunk mapped over [at, at + bytes).
bool mapChunk(uintptr_t at, size_t bytes, Chunk* chunk) {
  const int fd = ::memfd_create("fake-cuda-chunk", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::mmap(reinterpret_cast<void*>(at), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    return false;
  }
  *chunk = Chunk{fd, g_next_block++};
  return true;
}

CUresult getErrorName(CUresult, const char** out) {
  *out = "FAKE_CUDA_ERROR";
  return CUDA_SUCCESS;
}

// What the driver says about a pointer: fake device memory of either kind,
// or host memory.
struct PointerFacts {
  bool device = false;
  unsigned long long id = 0;
  uintptr_t range_start = 0;
  size_t range_size = 0;
  bool legacy = false;
  bool pool = false;
  int ordinal = 0;
  uintptr_t mapping_base = 0;
  size_t mapping_size = 0;
  unsigned long long block_id = 0;
};

PointerFacts factsOf(uintptr_t p) {
  PointerFacts f;
  if (const VmmRange* r = findRange(p)) {
    const size_t index = (p - r->base) / r->chunk;
    f = {true,     r->id,
         r->base,  r->bytes,
         false,    false,
         0,        r->base + index * r->chunk,
         r->chunk, r->chunks[index].block_id};
  } else if (const Allocation* a = find(p)) {
    f = {true, a->id, a->base, a->bytes, !a->pool, a->pool, a->device, a->base, a->bytes, a->id};
  }
  return f;
}

CUresult pointerGetAttributes(unsigned n, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const PointerFacts f = factsOf(static_cast<uintptr_t>(ptr));
  for (unsigned i = 0; i < n; ++i) {
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data[i]) = f.device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *static_cast<unsigned long long*>(data[i]) = f.id;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *static_cast<CUdeviceptr*>(data[i]) = f.range_start;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *static_cast<size_t*>(data[i]) = f.range_size;
        break;
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *static_cast<int*>(data[i]) = f.legacy ? 1 : 0;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data[i]) = f.ordinal;
        break;
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data[i]) = f.device ? contextOf(f.ordinal) : nullptr;
        break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *static_cast<CUmemoryPool*>(data[i]) = f.pool ? reinterpret_cast<CUmemoryPool>(0x9001) : nullptr;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *static_cast<void**>(data[i]) = reinterpret_cast<void*>(f.mapping_base);
        break;
      case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *static_cast<size_t*>(data[i]) = f.mapping_size;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *static_cast<unsigned long long*>(data[i]) = f.block_id;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult deviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= gradsync::fakegpu::kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult deviceGetUuid(CUuuid* uuid, CUdevice device) {
  std::memcpy(uuid->bytes, gradsync::fakegpu::kUuid, sizeof(uuid->bytes));
  uuid->bytes[15] = static_cast<char>(device + 1);
  return CUDA_SUCCESS;
}

CUresult ipcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Allocation* a = find(static_cast<uintptr_t>(ptr));
  if (a == nullptr || a->base != ptr || a->pool) return CUDA_ERROR_INVALID_VALUE;
  gradsync::fakegpu::Handle h{};
  std::memcpy(h.magic, gradsync::fakegpu::kHandleMagic, sizeof(h.magic));
  h.pid = ::getpid();
  h.fd = a->fd;
  h.bytes = a->bytes;
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, &h, sizeof(h));
  return CUDA_SUCCESS;
}

// A cuMem handle names a range and a chunk: (range index << 32 | chunk) + 1.
CUresult memRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* address) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto p = reinterpret_cast<uintptr_t>(address);
  VmmRange* r = findRange(p);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;  // cudaMalloc memory has no cuMem handle
  *handle = ((static_cast<unsigned long long>(r - g_ranges.data()) << 32) | ((p - r->base) / r->chunk)) + 1;
  return CUDA_SUCCESS;
}

CUresult memExportToShareableHandle(void* out, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                                    unsigned long long) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || handle == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  const size_t range = (handle - 1) >> 32, chunk = (handle - 1) & 0xffffffffu;
  if (range >= g_ranges.size() || chunk >= g_ranges[range].chunks.size()) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(out) = ::fcntl(g_ranges[range].chunks[chunk].fd, F_DUPFD_CLOEXEC, 0);
  return CUDA_SUCCESS;
}

CUresult memRelease(CUmemGenericAllocationHandle) { return CUDA_SUCCESS; }

CUresult eventCreate(CUevent* event, unsigned) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *event = reinterpret_cast<CUevent>(g_next_event++);
  return CUDA_SUCCESS;
}

CUresult ipcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, &event, sizeof(event));
  return CUDA_SUCCESS;
}

CUresult ipcOpenEventHandle(CUevent* event, CUipcEventHandle) { return eventCreate(event, 0); }
CUresult eventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult streamWaitEvent(CUstream, CUevent, unsigned) { return CUDA_SUCCESS; }
CUresult eventQuery(CUevent) { return CUDA_SUCCESS; }  // the host-memory "GPU" works at once
CUresult eventDestroy(CUevent) { return CUDA_SUCCESS; }
CUresult ctxPushCurrent(CUcontext ctx) {
  t_device = static_cast<int>(reinterpret_cast<uintptr_t>(ctx) - 0xC0);
  return CUDA_SUCCESS;
}
CUresult ctxPopCurrent(CUcontext* ctx) {
  *ctx = contextOf(t_device);
  return CUDA_SUCCESS;
}

void* allocate(size_t bytes, int device, bool pool);

CUresult memAlloc(CUdeviceptr* out, size_t bytes) {
  void* p = allocate(bytes, t_device, false);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult memFree(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto it = g_allocations.begin(); it != g_allocations.end(); ++it) {
    if (it->base != ptr) continue;
    ::munmap(reinterpret_cast<void*>(it->base), it->bytes);
    ::close(it->fd);
    g_allocations.erase(it);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult memcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

void* allocate(size_t bytes, int device, bool pool) {
  if (device < 0 || device >= gradsync::fakegpu::kMaxDevices) return nullptr;
  const int fd = ::memfd_create("fake-cuda", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations.push_back({reinterpret_cast<uintptr_t>(p), bytes, fd, g_next_id++, device, pool});
  return p;
}

struct Entry {
  const char* name;
  void* fn;
};

}  // namespace

extern "C" {

// Test helper: `bytes` of fake device memory (zeroed) on fake GPU
// `device`, or null.
void* gradsync_fake_cuda_malloc_on(size_t bytes, int device) { return allocate(bytes, device, false); }

// Test helper: the same from a stream-ordered pool (cudaMallocAsync).
void* gradsync_fake_cuda_malloc_pool(size_t bytes, int device) { return allocate(bytes, device, true); }

// Test helper: the same on GPU 0.
void* gradsync_fake_cuda_malloc(size_t bytes) { return gradsync_fake_cuda_malloc_on(bytes, 0); }

// Test helper: `bytes` of fake cuMem memory (zeroed) in chunks of `chunk`
// bytes (a multiple of the page size), or null.
void* gradsync_fake_cuda_malloc_vmm(size_t bytes, size_t chunk) {
  const size_t count = (bytes + chunk - 1) / chunk;
  void* p = ::mmap(nullptr, count * chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  VmmRange range{reinterpret_cast<uintptr_t>(p), count * chunk, chunk, g_next_id++, {}};
  for (size_t i = 0; i < count; ++i) {
    Chunk c{};
    if (!mapChunk(range.base + i * chunk, chunk, &c)) return nullptr;
    range.chunks.push_back(c);
  }
  g_ranges.push_back(std::move(range));
  return p;
}

// Test helper: the chunk holding `address` is unmapped and other (zeroed)
// memory mapped there, as an allocator that releases and maps again; 0 on
// success.
int gradsync_fake_cuda_remap(void* address) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto p = reinterpret_cast<uintptr_t>(address);
  VmmRange* r = findRange(p);
  if (r == nullptr) return -1;
  const size_t index = (p - r->base) / r->chunk;
  Chunk fresh{};
  if (!mapChunk(r->base + index * r->chunk, r->chunk, &fresh)) return -1;
  ::close(r->chunks[index].fd);
  r->chunks[index] = fresh;
  return 0;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  static const Entry table[] = {
      {"cuGetErrorName", reinterpret_cast<void*>(&getErrorName)},
      {"cuPointerGetAttributes", reinterpret_cast<void*>(&pointerGetAttributes)},
      {"cuDeviceGet", reinterpret_cast<void*>(&deviceGet)},
      {"cuDeviceGetUuid", reinterpret_cast<void*>(&deviceGetUuid)},
      {"cuIpcGetMemHandle", reinterpret_cast<void*>(&ipcGetMemHandle)},
      {"cuEventCreate", reinterpret_cast<void*>(&eventCreate)},
      {"cuIpcGetEventHandle", reinterpret_cast<void*>(&ipcGetEventHandle)},
      {"cuIpcOpenEventHandle", reinterpret_cast<void*>(&ipcOpenEventHandle)},
      {"cuEventRecord", reinterpret_cast<void*>(&eventRecord)},
      {"cuStreamWaitEvent", reinterpret_cast<void*>(&streamWaitEvent)},
      {"cuEventQuery", reinterpret_cast<void*>(&eventQuery)},
      {"cuEventDestroy", reinterpret_cast<void*>(&eventDestroy)},
      {"cuCtxPushCurrent", reinterpret_cast<void*>(&ctxPushCurrent)},
      {"cuCtxPopCurrent", reinterpret_cast<void*>(&ctxPopCurrent)},
      {"cuMemRetainAllocationHandle", reinterpret_cast<void*>(&memRetainAllocationHandle)},
      {"cuMemExportToShareableHandle", reinterpret_cast<void*>(&memExportToShareableHandle)},
      {"cuMemRelease", reinterpret_cast<void*>(&memRelease)},
      {"cuMemAlloc", reinterpret_cast<void*>(&memAlloc)},
      {"cuMemFree", reinterpret_cast<void*>(&memFree)},
      {"cuMemcpyDtoDAsync", reinterpret_cast<void*>(&memcpyDtoDAsync)},
  };
  for (const auto& e : table) {
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
