#!/usr/bin/python3
"""gpu_facts.py - facts about a GPU machine that the multi-GPU daemon's design
rests on, measured on the machine itself (run there by scripts/gpu_check.sh
facts):

  inventory      every device the driver shows: UUID, PCI bus, NUMA node (sysfs),
                 and the peer-to-peer attributes between each pair.
  vmm ALLOC      how a tensor of PyTorch's allocator ALLOC (native,
                 expandable, async) can be exported: legacy CUDA IPC or not,
                 the cuMem allocation handles under it and their allowed
                 handle types, and whether another process maps it through a
                 POSIX file descriptor (pidfd_getfd) and reads the same bytes.
  nccl N LIB     N NCCL ranks on GPU 0 held by ONE process (the daemon's shape
                 for virtual GPUs): ncclCommInitAll / grouped ncclCommInitRank,
                 then grouped float32 allreduces timed, busbw as nccl-tests
                 counts it; next to a device-to-device copy of the same size.
"""
import ctypes
import os
import statistics
import subprocess
import sys
import time

CUDA_SUCCESS = 0


def libcuda():
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    return cuda


def check(rc, what):
    if rc != CUDA_SUCCESS:
        raise RuntimeError("%s failed: %d" % (what, rc))


def inventory():
    cuda = libcuda()
    n = ctypes.c_int()
    check(cuda.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    print("devices:", n.value)
    for i in range(n.value):
        dev = ctypes.c_int()
        check(cuda.cuDeviceGet(ctypes.byref(dev), i), "cuDeviceGet")
        uuid = (ctypes.c_ubyte * 16)()
        check(cuda.cuDeviceGetUuid_v2(uuid, dev), "cuDeviceGetUuid_v2")
        bus = ctypes.create_string_buffer(32)
        check(cuda.cuDeviceGetPCIBusId(bus, 32, dev), "cuDeviceGetPCIBusId")
        name = ctypes.create_string_buffer(128)
        cuda.cuDeviceGetName(name, 128, dev)
        pci = bus.value.decode().lower()
        numa = "?"
        for candidate in (pci, pci[4:] if len(pci) > 12 else pci):
            path = "/sys/bus/pci/devices/%s/numa_node" % candidate
            if os.path.exists(path):
                numa = open(path).read().strip()
        hexid = bytes(uuid).hex()
        print("  %d %s GPU-%s-%s-%s-%s-%s pci %s numa %s" % (
            i, name.value.decode(), hexid[:8], hexid[8:12], hexid[12:16], hexid[16:20], hexid[20:], pci, numa))
    for i in range(n.value):
        for j in range(n.value):
            if i == j:
                continue
            values = []
            for attr in (1, 2, 3, 4):  # PERFORMANCE_RANK, ACCESS_SUPPORTED, NATIVE_ATOMIC, CUDA_ARRAY_ACCESS
                v = ctypes.c_int(-1)
                cuda.cuDeviceGetP2PAttribute(ctypes.byref(v), attr, i, j)
                values.append(v.value)
            print("  p2p %d->%d perf_rank %d access %d atomics %d arrays %d" % (i, j, *values))
    try:
        print(subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("nvidia-smi topo -m:", e)


def pointer_attr(cuda, attr, ptr, ctype=ctypes.c_ulonglong):
    v = ctype(0)
    rc = cuda.cuPointerGetAttribute(ctypes.byref(v), attr, ctypes.c_ulonglong(ptr))
    return v.value if rc == CUDA_SUCCESS else "error %d" % rc


def vmm(alloc):
    conf = {"native": "", "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}[alloc]
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    import torch
    torch.cuda.init()
    cuda = libcuda()
    size = 256 << 20
    x = torch.arange(size // 4, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    ptr = x.data_ptr()
    print("allocator %s (PYTORCH_CUDA_ALLOC_CONF=%r), tensor 256 MiB at 0x%x" % (alloc, conf, ptr))
    for name, attr in (("legacy_ipc_capable", 10), ("range_start", 11), ("range_size", 12),
                       ("allowed_handle_types", 14), ("mempool", 17), ("mapping_size", 18),
                       ("mapping_base", 19), ("memory_block_id", 20)):
        value = pointer_attr(cuda, attr, ptr)
        print("  %-22s %s" % (name, hex(value) if isinstance(value, int) and value > 4096 else value))
    ipc = (ctypes.c_byte * 64)()
    print("  cuIpcGetMemHandle: rc", cuda.cuIpcGetMemHandle(ipc, ctypes.c_ulonglong(ptr)))
    # The cuMem handles under the tensor: one per mapping.
    handles = []
    offset = 0
    while offset < size:
        h = ctypes.c_ulonglong()
        rc = cuda.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(ptr + offset))
        if rc != CUDA_SUCCESS:
            print("  cuMemRetainAllocationHandle at +%d: rc %d" % (offset, rc))
            break
        base = pointer_attr(cuda, 19, ptr + offset)
        msize = pointer_attr(cuda, 18, ptr + offset)
        prop = (ctypes.c_byte * 64)()
        cuda.cuMemGetAllocationPropertiesFromHandle(prop, h)
        requested = int.from_bytes(bytes(prop[4:8]), "little")
        handles.append((offset, h.value, base, msize, requested))
        if not isinstance(base, int) or not isinstance(msize, int) or msize == 0:
            break
        offset = base + msize - ptr
    print("  cuMem mappings under the tensor: %d" % len(handles))
    for offset, h, base, msize, requested in handles[:4]:
        print("    +%d: handle %#x mapping base %#x size %s requested handle types %d" % (
            offset, h, base, msize, requested))
    if not handles:
        return
    offset, h, base, msize, requested = handles[0]
    fd = ctypes.c_int(-1)
    rc = cuda.cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_ulonglong(h), 1, ctypes.c_ulonglong(0))
    print("  cuMemExportToShareableHandle(POSIX_FD): rc %d fd %d" % (rc, fd.value))
    if rc != CUDA_SUCCESS:
        return
    # Another process takes the fd by pidfd_getfd, maps it, and reads the first
    # floats of the tensor (0, 1, 2, ...).
    child = subprocess.run([sys.executable, __file__, "vmm-import", str(os.getpid()), str(fd.value), str(msize),
                            str(ptr - base)], capture_output=True, text=True, timeout=60)
    print("  another process:", (child.stdout + child.stderr).strip().replace("\n", "\n    "))


def vmm_import(pid, fd, size, offset):
    cuda = libcuda()
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    local = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
    if local < 0:
        print("pidfd_getfd failed: errno", ctypes.get_errno())
        return
    h = ctypes.c_ulonglong()
    check(cuda.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(local), 1),
          "cuMemImportFromShareableHandle")
    va = ctypes.c_ulonglong()
    check(cuda.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                   ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
    check(cuda.cuMemMap(va, ctypes.c_size_t(size), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)), "cuMemMap")
    desc = (ctypes.c_int * 3)(1, 0, 3)  # location DEVICE 0, READWRITE
    check(cuda.cuMemSetAccess(va, ctypes.c_size_t(size), desc, ctypes.c_size_t(1)), "cuMemSetAccess")
    out = (ctypes.c_float * 4)()
    check(cuda.cuMemcpyDtoH_v2(out, ctypes.c_ulonglong(va.value + offset), ctypes.c_size_t(16)), "cuMemcpyDtoH")
    t0 = time.perf_counter()
    check(cuda.cuMemUnmap(va, ctypes.c_size_t(size)), "cuMemUnmap")
    cuda.cuMemRelease(h)
    cuda.cuMemAddressFree(va, ctypes.c_size_t(size))
    print("mapped %d bytes by fd, read %s (expect 0 1 2 3); unmap+release %.1f us" % (
        size, " ".join("%g" % v for v in out), (time.perf_counter() - t0) * 1e6))


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def nccl_ranks(n, library):
    import torch
    nccl = ctypes.CDLL(library)
    version = ctypes.c_int()
    nccl.ncclGetVersion(ctypes.byref(version))
    print("NCCL %d from %s, %d ranks in one process on %s, NCCL_MULTI_RANK_GPU_ENABLE=%s" % (
        version.value, library, n, torch.cuda.get_device_name(0), os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE")))
    torch.cuda.set_device(0)
    torch.cuda.init()
    comms = (ctypes.c_void_p * n)()
    devs = (ctypes.c_int * n)(*([0] * n))
    t0 = time.perf_counter()
    rc = nccl.ncclCommInitAll(comms, n, devs)
    print("  ncclCommInitAll(%d ranks on device 0): rc %d in %.0f ms" % (n, rc, (time.perf_counter() - t0) * 1e3))
    if rc != 0:
        uid = UniqueId()
        check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        nccl.ncclGroupStart()
        for r in range(n):
            nccl.ncclCommInitRank(ctypes.byref(ctypes.c_void_p.from_buffer(comms, r * 8)), n, uid, r)
        rc = nccl.ncclGroupEnd()
        print("  grouped ncclCommInitRank: rc %d" % rc)
        if rc != 0:
            return
    streams = [torch.cuda.Stream() for _ in range(n)]
    for size in (1 << 20, 16 << 20, 64 << 20, 256 << 20):
        bufs = [torch.full((size // 4,), float(r + 1), device="cuda") for r in range(n)]

        def allreduce():
            nccl.ncclGroupStart()
            for r in range(n):
                nccl.ncclAllReduce(ctypes.c_void_p(bufs[r].data_ptr()), ctypes.c_void_p(bufs[r].data_ptr()),
                                   ctypes.c_size_t(size // 4), 7, 0, ctypes.c_void_p(comms[r]),
                                   ctypes.c_void_p(streams[r].cuda_stream))
            rc = nccl.ncclGroupEnd()
            if rc != 0:
                raise RuntimeError("ncclGroupEnd: %d" % rc)
            torch.cuda.synchronize()

        allreduce()
        want = n * (n + 1) / 2
        got = [b[0].item() for b in bufs] + [bufs[0][-1].item()]
        if any(v != want for v in got):
            print("  WRONG allreduce result %s, expected %s" % (got, want))
            return
        times = []
        for _ in range(20 if size < (64 << 20) else 8):
            t0 = time.perf_counter()
            allreduce()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        algbw = size / med / 1e9
        src = bufs[0].clone()
        copy = []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            bufs[1].copy_(src)
            torch.cuda.synchronize()
            copy.append(time.perf_counter() - t0)
        print("  one process, %d ranks, %10d B: median %9.1f us algbw %6.1f GB/s busbw %6.1f GB/s;"
              " D2D copy %6.1f GB/s" % (n, size, med * 1e6, algbw, algbw * 2 * (n - 1) / n,
                                         size / statistics.median(copy) / 1e9))
    for r in range(n):
        nccl.ncclCommDestroy(ctypes.c_void_p(comms[r]))


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "inventory"
    if what == "inventory":
        inventory()
    elif what == "vmm":
        vmm(sys.argv[2])
    elif what == "vmm-import":
        vmm_import(*map(int, sys.argv[2:6]))
    elif what == "nccl":
        nccl_ranks(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
