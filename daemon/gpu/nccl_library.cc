// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <vector>

namespace gradsync::gpu {
namespace {

constexpr const char* kBuildToolkitNccl = "/usr/local/cuda/lib64/libnccl.so.2";

template <typename Fn>
Status resolve(void* handle, const char* symbol, Fn* out) {
  void* address = ::dlsym(handle, symbol);
  if (address == nullptr) return failedPrecondition(std::string("NCCL library lacks ") + symbol);
  *out = reinterpret_cast<Fn>(address);
  return okStatus();
}

Status resolveAll(void* h, NcclApi* a) {
  RETURN_IF_ERROR(resolve(h, "ncclGetVersion", &a->getVersion));
  RETURN_IF_ERROR(resolve(h, "ncclGetUniqueId", &a->getUniqueId));
  RETURN_IF_ERROR(resolve(h, "ncclGetErrorString", &a->getErrorString));
  RETURN_IF_ERROR(resolve(h, "ncclCommInitRankConfig", &a->commInitRankConfig));
  RETURN_IF_ERROR(resolve(h, "ncclCommSplit", &a->commSplit));
  RETURN_IF_ERROR(resolve(h, "ncclCommCount", &a->commCount));
  RETURN_IF_ERROR(resolve(h, "ncclCommUserRank", &a->commUserRank));
  RETURN_IF_ERROR(resolve(h, "ncclCommGetAsyncError", &a->commGetAsyncError));
  RETURN_IF_ERROR(resolve(h, "ncclCommAbort", &a->commAbort));
  RETURN_IF_ERROR(resolve(h, "ncclCommFinalize", &a->commFinalize));
  RETURN_IF_ERROR(resolve(h, "ncclCommDestroy", &a->commDestroy));
  RETURN_IF_ERROR(resolve(h, "ncclGroupStart", &a->groupStart));
  RETURN_IF_ERROR(resolve(h, "ncclGroupEnd", &a->groupEnd));
  RETURN_IF_ERROR(resolve(h, "ncclAllReduce", &a->allReduce));
  RETURN_IF_ERROR(resolve(h, "ncclBroadcast", &a->broadcast));
  RETURN_IF_ERROR(resolve(h, "ncclAllGather", &a->allGather));
  RETURN_IF_ERROR(resolve(h, "ncclReduceScatter", &a->reduceScatter));
  RETURN_IF_ERROR(resolve(h, "ncclSend", &a->send));
  RETURN_IF_ERROR(resolve(h, "ncclRecv", &a->recv));
  // Optional (2.13+): a better message than the error string alone.
  a->getLastError = reinterpret_cast<const char* (*)(ncclComm_t)>(::dlsym(h, "ncclGetLastError"));
  return okStatus();
}

std::string loadedPath(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

}  // namespace

StatusOr<std::unique_ptr<NcclLibrary>> NcclLibrary::load(const std::string& path) {
  std::vector<std::string> candidates;
  if (!path.empty()) {
    candidates.push_back(path);
  } else {
    candidates = {"libnccl.so.2", kBuildToolkitNccl};
  }
  std::string errors;
  void* handle = nullptr;
  for (const auto& candidate : candidates) {
    // RTLD_NODELETE: ncclGetUniqueId starts a bootstrap-root thread that outlives
    // every call; unmapping NCCL under it crashes the process at exit.
    handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle != nullptr) break;
    const char* why = ::dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(why != nullptr ? why : candidate.c_str());
  }
  if (handle == nullptr) return notFound("cannot load NCCL: " + errors);
  std::unique_ptr<NcclLibrary> library(new NcclLibrary());
  library->handle_ = handle;
  library->path_ = loadedPath(handle, candidates.front());
  RETURN_IF_ERROR(resolveAll(handle, &library->api_));
  int version = 0;
  const ncclResult_t result = library->api_.getVersion(&version);
  if (result != ncclSuccess) return internalError("ncclGetVersion failed: " + library->errorText(result));
  library->version_ = version;
  if (version < kMinNcclVersion) {
    return failedPrecondition("NCCL " + ncclVersionString(version) + " at " + library->path_ + " is older than " +
                              ncclVersionString(kMinNcclVersion) + ", the oldest gradsyncd uses");
  }
  return library;
}

NcclLibrary::~NcclLibrary() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

StatusOr<std::string> NcclLibrary::uniqueId() const {
  ncclUniqueId id{};
  const ncclResult_t result = api_.getUniqueId(&id);
  if (result != ncclSuccess) return internalError("ncclGetUniqueId failed: " + errorText(result));
  return std::string(id.internal, sizeof(id.internal));
}

std::string NcclLibrary::errorText(ncclResult_t result) const {
  const char* text = api_.getErrorString != nullptr ? api_.getErrorString(result) : nullptr;
  return "NCCL error " + std::to_string(static_cast<int>(result)) + (text != nullptr ? std::string(": ") + text : "");
}

std::string ncclVersionString(int code) {
  // NCCL_VERSION(X,Y,Z): X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

}  // namespace gradsync::gpu
