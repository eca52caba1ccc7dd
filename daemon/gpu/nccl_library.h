// SPDX-License-Identifier: Apache-2.0
// NCCL, loaded at run time with dlopen: the daemon starts on machines without
// NCCL (or without a GPU), and an operator can pick a newer libnccl.so.2 than
// the one the build saw with GRADSYNC_NCCL_LIBRARY (e.g. the one PyTorch
// brings, for NCCL_MULTI_RANK_GPU_ENABLE which needs >= 2.30). The symbols are
// resolved once into a table of function pointers; only the ABI of nccl.h
// (stable since 2.18) is used.
#pragma once

#include <nccl.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace gradsync::gpu {

// The oldest NCCL accepted: non-blocking communicators and ncclCommSplit.
constexpr int kMinNcclVersion = 21800;

struct NcclApi {
  ncclResult_t (*getVersion)(int*) = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId*) = nullptr;
  const char* (*getErrorString)(ncclResult_t) = nullptr;
  const char* (*getLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*commInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*commSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) = nullptr;
  ncclResult_t (*commCount)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*commUserRank)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commFinalize)(ncclComm_t) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
};

class NcclLibrary {
 public:
  // Loads `path` when non-empty (an error if that fails: an operator who
  // names a library means it), else libnccl.so.2 from the loader's search
  // path, else the one beside the CUDA toolkit the build used.
  static StatusOr<std::unique_ptr<NcclLibrary>> load(const std::string& path);
  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  const NcclApi& api() const { return api_; }
  int version() const { return version_; }
  // The file the loader actually opened.
  const std::string& path() const { return path_; }
  // A fresh ncclUniqueId (128 bytes) for a new communicator. Works without a
  // GPU or driver.
  StatusOr<std::string> uniqueId() const;
  // "ncclSystemError (2): <NCCL's text>".
  std::string errorText(ncclResult_t result) const;

 private:
  NcclLibrary() = default;
  void* handle_ = nullptr;
  NcclApi api_;
  int version_ = 0;
  std::string path_;
};

// "2.28.9" for 22809 (and the pre-2.9 encoding 2708 -> "2.7.8").
std::string ncclVersionString(int code);

}  // namespace gradsync::gpu
