// SPDX-License-Identifier: Apache-2.0
// CUDA kernels behind local_reduce.h: one grid-stride pass reads every
// input element once and writes every output once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "daemon/collective/cuda/local_reduce.h"

namespace gradsync::cuda {
namespace {

struct Params {
  const void* inputs[kMaxLocalBuffers];
  void* outputs[kMaxLocalBuffers];
  int num_inputs;
  int num_outputs;
  uint64_t start;  // first element this launch covers (the scalar tail after a vector pass)
  uint64_t count;  // one past the last
  double prescale;
  double postscale;
  int divisor;  // 1 unless AVERAGE
  bool pre_on;
  bool post_on;
};

// ---- floating types: acc in C (float for the 16-bit types) ----

template <typename T>
struct Wide {
  using type = T;
};
template <>
struct Wide<__half> {
  using type = float;
};
template <>
struct Wide<__nv_bfloat16> {
  using type = float;
};

template <typename T>
__device__ __forceinline__ typename Wide<T>::type widen(T v) {
  return v;
}
template <>
__device__ __forceinline__ float widen(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float widen(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T narrow(typename Wide<T>::type v) {
  return v;
}
template <>
__device__ __forceinline__ __half narrow<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename C>
__device__ __forceinline__ C nanMin(C a, C b) {
  return (a != a || b != b) ? a + b : (b < a ? b : a);
}
template <typename C>
__device__ __forceinline__ C nanMax(C a, C b) {
  return (a != a || b != b) ? a + b : (b > a ? b : a);
}

template <typename T, Op kOp>
__global__ void floatKernel(Params p) {
  using C = typename Wide<T>::type;
  const C pre = static_cast<C>(p.prescale);
  const C post = static_cast<C>(p.postscale);
  const C divisor = static_cast<C>(p.divisor);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = p.start + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < p.count; i += stride) {
    C acc = widen(static_cast<const T*>(p.inputs[0])[i]);
    if (p.pre_on) acc = acc * pre;  // built with --fmad=false: no contraction, as on the CPU
    for (int k = 1; k < p.num_inputs; ++k) {
      C x = widen(static_cast<const T*>(p.inputs[k])[i]);
      if (p.pre_on) x = x * pre;
      if constexpr (kOp == Op::kSum || kOp == Op::kAverage)
        acc = acc + x;
      else if constexpr (kOp == Op::kProduct)
        acc = acc * x;
      else if constexpr (kOp == Op::kMin)
        acc = nanMin(acc, x);
      else
        acc = nanMax(acc, x);
    }
    if (kOp == Op::kAverage && p.divisor != 1) acc = acc / divisor;
    if (p.post_on) acc = acc * post;
    const T out = narrow<T>(acc);
    for (int j = 0; j < p.num_outputs; ++j) static_cast<T*>(p.outputs[j])[i] = out;
  }
}

// The same in 16-byte vectors (4 floats, 8 halves, 2 doubles per load and
// store), for buffers all 16-byte aligned: the same arithmetic per element,
// fewer memory transactions. Elements [0, vectors * V); the scalar kernel
// does the rest.
template <typename T, Op kOp>
__global__ void floatKernelVector(Params p, uint64_t vectors) {
  using C = typename Wide<T>::type;
  constexpr int V = 16 / sizeof(T);
  const C pre = static_cast<C>(p.prescale);
  const C post = static_cast<C>(p.postscale);
  const C divisor = static_cast<C>(p.divisor);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t v = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; v < vectors; v += stride) {
    C acc[V];
    {
      const uint4 raw = static_cast<const uint4*>(p.inputs[0])[v];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = p.pre_on ? widen(e[j]) * pre : widen(e[j]);
    }
    for (int k = 1; k < p.num_inputs; ++k) {
      const uint4 raw = static_cast<const uint4*>(p.inputs[k])[v];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        C x = widen(e[j]);
        if (p.pre_on) x = x * pre;
        if constexpr (kOp == Op::kSum || kOp == Op::kAverage)
          acc[j] = acc[j] + x;
        else if constexpr (kOp == Op::kProduct)
          acc[j] = acc[j] * x;
        else if constexpr (kOp == Op::kMin)
          acc[j] = nanMin(acc[j], x);
        else
          acc[j] = nanMax(acc[j], x);
      }
    }
    uint4 packed;
    T* out = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      C r = acc[j];
      if (kOp == Op::kAverage && p.divisor != 1) r = r / divisor;
      if (p.post_on) r = r * post;
      out[j] = narrow<T>(r);
    }
    for (int o = 0; o < p.num_outputs; ++o) static_cast<uint4*>(p.outputs[o])[v] = packed;
  }
}

// ---- integers ----

template <typename T>
__device__ __forceinline__ T scaleInteger(T v, double factor) {
  const double x = trunc(static_cast<double>(v) * factor);  // Horovod: truncated toward zero
  if (x != x) return 0;
  if (x <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (x >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(x);
}

template <typename T, Op kOp>
__global__ void intKernel(Params p) {
  using U = std::make_unsigned_t<T>;
  using Wide64 = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = p.start + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < p.count; i += stride) {
    T out;
    if constexpr (kOp == Op::kAverage) {
      uint64_t sum = 0;  // wraps at 2^64, as on the CPU
      for (int k = 0; k < p.num_inputs; ++k) {
        T x = static_cast<const T*>(p.inputs[k])[i];
        if (p.pre_on) x = scaleInteger(x, p.prescale);
        sum += static_cast<uint64_t>(static_cast<Wide64>(x));
      }
      out = static_cast<T>(static_cast<U>(static_cast<Wide64>(sum) / static_cast<Wide64>(p.divisor)));
    } else {
      T acc = static_cast<const T*>(p.inputs[0])[i];
      if (p.pre_on) acc = scaleInteger(acc, p.prescale);
      for (int k = 1; k < p.num_inputs; ++k) {
        T x = static_cast<const T*>(p.inputs[k])[i];
        if (p.pre_on) x = scaleInteger(x, p.prescale);
        if constexpr (kOp == Op::kSum)
          acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(x)));
        else if constexpr (kOp == Op::kProduct)
          acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) * static_cast<U>(x)));
        else if constexpr (kOp == Op::kMin)
          acc = x < acc ? x : acc;
        else
          acc = x > acc ? x : acc;
      }
      out = acc;
    }
    if (p.post_on) out = scaleInteger(out, p.postscale);
    for (int j = 0; j < p.num_outputs; ++j) static_cast<T*>(p.outputs[j])[i] = out;
  }
}

template <bool kAnd>
__global__ void boolKernel(Params p) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = p.start + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < p.count; i += stride) {
    bool acc = static_cast<const uint8_t*>(p.inputs[0])[i] != 0;
    for (int k = 1; k < p.num_inputs; ++k) {
      const bool x = static_cast<const uint8_t*>(p.inputs[k])[i] != 0;
      acc = kAnd ? (acc && x) : (acc || x);
    }
    for (int j = 0; j < p.num_outputs; ++j) static_cast<uint8_t*>(p.outputs[j])[i] = acc ? 1 : 0;
  }
}

template <typename T, Op kOp>
void launchFloatOp(Params p, dim3 block, cudaStream_t s) {
  constexpr uint64_t V = 16 / sizeof(T);
  bool aligned = true;
  for (int k = 0; k < p.num_inputs; ++k) aligned &= reinterpret_cast<uintptr_t>(p.inputs[k]) % 16 == 0;
  for (int j = 0; j < p.num_outputs; ++j) aligned &= reinterpret_cast<uintptr_t>(p.outputs[j]) % 16 == 0;
  const uint64_t vectors = aligned ? p.count / V : 0;
  if (vectors > 0) {
    const uint64_t blocks = (vectors + block.x - 1) / block.x;
    floatKernelVector<T, kOp><<<dim3(static_cast<unsigned>(blocks < 8192 ? blocks : 8192)), block, 0, s>>>(p, vectors);
    p.start = vectors * V;
  }
  if (p.start < p.count) {
    const uint64_t blocks = (p.count - p.start + block.x - 1) / block.x;
    floatKernel<T, kOp><<<dim3(static_cast<unsigned>(blocks < 8192 ? blocks : 8192)), block, 0, s>>>(p);
  }
}

template <typename T>
void launchFloat(Op op, const Params& p, dim3 grid, dim3 block, cudaStream_t s) {
  switch (op) {
    case Op::kSum:
      launchFloatOp<T, Op::kSum>(p, block, s);
      break;
    case Op::kAverage:
      launchFloatOp<T, Op::kAverage>(p, block, s);
      break;
    case Op::kMin:
      launchFloatOp<T, Op::kMin>(p, block, s);
      break;
    case Op::kMax:
      launchFloatOp<T, Op::kMax>(p, block, s);
      break;
    case Op::kProduct:
      launchFloatOp<T, Op::kProduct>(p, block, s);
      break;
  }
}

template <typename T>
void launchInt(Op op, const Params& p, dim3 grid, dim3 block, cudaStream_t s) {
  switch (op) {
    case Op::kSum:
      intKernel<T, Op::kSum><<<grid, block, 0, s>>>(p);
      break;
    case Op::kAverage:
      intKernel<T, Op::kAverage><<<grid, block, 0, s>>>(p);
      break;
    case Op::kMin:
      intKernel<T, Op::kMin><<<grid, block, 0, s>>>(p);
      break;
    case Op::kMax:
      intKernel<T, Op::kMax><<<grid, block, 0, s>>>(p);
      break;
    case Op::kProduct:
      intKernel<T, Op::kProduct><<<grid, block, 0, s>>>(p);
      break;
  }
}

}  // namespace

std::string launchLocalReduce(const LocalReduceArgs& args, void* stream) {
  if (args.count == 0) return "";
  if (args.num_inputs < 1 || args.num_inputs > kMaxLocalBuffers || args.num_outputs < 1 ||
      args.num_outputs > kMaxLocalBuffers) {
    return "launchLocalReduce: bad buffer counts";
  }
  Params p{};
  for (int k = 0; k < args.num_inputs; ++k) p.inputs[k] = args.inputs[k];
  for (int j = 0; j < args.num_outputs; ++j) p.outputs[j] = args.outputs[j];
  p.num_inputs = args.num_inputs;
  p.num_outputs = args.num_outputs;
  p.start = 0;
  p.count = args.count;
  p.prescale = args.prescale;
  p.postscale = args.postscale;
  p.divisor = args.op == Op::kAverage ? args.average_divisor : 1;
  p.pre_on = args.prescale != 1.0;
  p.post_on = args.postscale != 1.0;
  const dim3 block(512);
  const uint64_t blocks = (args.count + block.x - 1) / block.x;
  const dim3 grid(static_cast<unsigned>(blocks < 8192 ? blocks : 8192));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (args.dtype) {
    case Dtype::kFloat32:
      launchFloat<float>(args.op, p, grid, block, s);
      break;
    case Dtype::kFloat64:
      launchFloat<double>(args.op, p, grid, block, s);
      break;
    case Dtype::kFloat16:
      launchFloat<__half>(args.op, p, grid, block, s);
      break;
    case Dtype::kBfloat16:
      launchFloat<__nv_bfloat16>(args.op, p, grid, block, s);
      break;
    case Dtype::kUint8:
      launchInt<uint8_t>(args.op, p, grid, block, s);
      break;
    case Dtype::kInt8:
      launchInt<int8_t>(args.op, p, grid, block, s);
      break;
    case Dtype::kUint16:
      launchInt<uint16_t>(args.op, p, grid, block, s);
      break;
    case Dtype::kInt16:
      launchInt<int16_t>(args.op, p, grid, block, s);
      break;
    case Dtype::kInt32:
      launchInt<int32_t>(args.op, p, grid, block, s);
      break;
    case Dtype::kInt64:
      launchInt<int64_t>(args.op, p, grid, block, s);
      break;
    case Dtype::kBool:
      if (args.op == Op::kMin)
        boolKernel<true><<<grid, block, 0, s>>>(p);
      else
        boolKernel<false><<<grid, block, 0, s>>>(p);
      break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string("kernel launch: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
}

}  // namespace gradsync::cuda
