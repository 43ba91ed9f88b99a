// Note [CUDA scale kernels]: one kernel template serves scale in place,
// copy-and-scale and the batched copy into and out of a fusion buffer. A
// launch carries up to CopiesPerLaunch() descriptors by value; each
// descriptor gets a contiguous range of blocks (found by a binary search on
// blockIdx.x), and each block streams 16 KiB per step: 256 threads, each
// with four 16-byte loads in flight before its stores. A descriptor whose
// source and destination share their offset modulo 16 bytes is copied as
// scalars up to the first aligned element ("head"), 16-byte vectors, and a
// scalar tail; any other descriptor is copied element by element.
//
// Note [Descriptors per launch]: a fusion buffer of ResNet-50's 161
// gradients took three launches of 64 descriptors (the 4 KiB of kernel
// arguments every driver takes), and each launch ended on a part-filled
// wave of blocks: 64 MB packed at 0.70 of cudaMemcpyAsync on an H200, one
// tensor of the same bytes at 0.95. CUDA 12.1 drivers take 32,764 bytes of
// arguments for Volta and newer, enough for 600 descriptors, so the whole
// buffer is one launch there. The larger kernel is built when every target
// architecture is sm_70 or newer (setup.py defines
// MXPLUGIN_CUDA_LARGE_KERNEL_ARGS) and the toolkit is 12.1 or newer, and
// used when the driver is too (CopiesPerLaunch()); else the 4 KiB one.
#include "scale_kernels.h"

#include "common/saturate.h"
#include "device.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <string>

namespace mxplugin {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kVectorBytes = 16;
// Descriptors larger than this many block-steps are covered by strided loops.
constexpr int64_t kMaxBlocksPerCopy = 1 << 16;

// Note [Descriptors per launch]: the two capacities of a launch.
constexpr int kSmallCopiesPerLaunch = 64;
#if defined(MXPLUGIN_CUDA_LARGE_KERNEL_ARGS) && CUDART_VERSION >= 12010
#define MXPLUGIN_LARGE_LAUNCH 1
constexpr int kLargeCopiesPerLaunch = 600;
constexpr int kLargeArgsDriver = 12010;  // the first driver that takes 32,764 bytes of arguments
#endif

// Element traits: how a dtype is stored and in which type it is scaled.
template <typename T, typename C>
struct Plain {
  using Storage = T;
  using Compute = C;
  __device__ static C Load(T v) { return static_cast<C>(v); }
  // Integers saturate, as on the CPU (common/saturate.h).
  __device__ static T Store(C v) {
    if constexpr (std::is_integral<T>::value) {
      return SaturateToInteger<T>(static_cast<double>(v));
    } else {
      return static_cast<T>(v);
    }
  }
};

struct Half {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float Load(uint16_t v) { return __half2float(__ushort_as_half(v)); }
  __device__ static uint16_t Store(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float Load(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
  __device__ static uint16_t Store(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};

// 16 bytes of elements, moved with one vector load/store.
template <typename T>
union Pack {
  uint4 raw;
  T v[kVectorBytes / sizeof(T)];
};

// One descriptor as the kernel sees it, prepared on the host.
struct Segment {
  const void* src;
  void* dst;
  int64_t count;
  double scale;
  int32_t first_block;  // this segment owns blocks [first_block, first_block + num_blocks)
  int32_t num_blocks;
  int32_t head;  // scalar elements before the vectors; -1: no vector path
  int32_t unused;
};

template <int kCapacity>
struct Batch {
  Segment segments[kCapacity];
  int32_t num_segments;
};
static_assert(sizeof(Batch<kSmallCopiesPerLaunch>) <= 4096, "kernel arguments must stay within 4 KiB");
#ifdef MXPLUGIN_LARGE_LAUNCH
static_assert(sizeof(Batch<kLargeCopiesPerLaunch>) <= 32764, "kernel arguments must stay within 32,764 bytes");
#endif

template <typename E>
__device__ __forceinline__ typename E::Storage ScaleValue(typename E::Storage v, typename E::Compute scale) {
  return E::Store(E::Load(v) * scale);
}

template <typename E>
__device__ __forceinline__ Pack<typename E::Storage> ScaleValue(Pack<typename E::Storage> p,
                                                               typename E::Compute scale) {
#pragma unroll
  for (int j = 0; j < kVectorBytes / static_cast<int>(sizeof(typename E::Storage)); ++j) {
    p.v[j] = ScaleValue<E>(p.v[j], scale);
  }
  return p;
}

template <typename T>
__device__ __forceinline__ T LoadUnit(const T* p) { return *p; }
template <typename T>
__device__ __forceinline__ Pack<T> LoadUnit(const Pack<T>* p) {
  Pack<T> out;
  out.raw = p->raw;
  return out;
}
template <typename T>
__device__ __forceinline__ void StoreUnit(T* p, T v) { *p = v; }
template <typename T>
__device__ __forceinline__ void StoreUnit(Pack<T>* p, Pack<T> v) { p->raw = v.raw; }

// Units (elements or packs) [0, n) of one segment, shared by `num_blocks`
// blocks of which this is `block`. All loads of a step are issued before its
// stores, which keeps in-place scaling correct (each thread writes only what
// it read) and keeps four loads in flight per thread.
template <typename E, typename Unit>
__device__ __forceinline__ void StreamUnits(const Unit* src, Unit* dst, int64_t n, typename E::Compute scale,
                                            bool scaled, int64_t block, int64_t num_blocks) {
  constexpr int64_t kStep = static_cast<int64_t>(kThreads) * kUnroll;
  for (int64_t base = block * kStep; base < n; base += num_blocks * kStep) {
    Unit r[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = base + k * kThreads + threadIdx.x;
      if (i < n) r[k] = LoadUnit(src + i);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = base + k * kThreads + threadIdx.x;
      if (i < n) StoreUnit(dst + i, scaled ? ScaleValue<E>(r[k], scale) : r[k]);
    }
  }
}

template <typename E, int kCapacity>
__global__ void __launch_bounds__(kThreads) CopyAndScaleKernel(const __grid_constant__ Batch<kCapacity> batch) {
  using T = typename E::Storage;
  using C = typename E::Compute;
  constexpr int kWidth = kVectorBytes / sizeof(T);

  int lo = 0;
  int hi = batch.num_segments - 1;
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.segments[mid].first_block <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const Segment& seg = batch.segments[lo];
  const T* src = static_cast<const T*>(seg.src);
  T* dst = static_cast<T*>(seg.dst);
  const C scale = static_cast<C>(seg.scale);
  const bool scaled = seg.scale != 1.0;
  const int64_t block = b - seg.first_block;

  if (seg.head < 0) {
    StreamUnits<E>(src, dst, seg.count, scale, scaled, block, seg.num_blocks);
    return;
  }
  const int64_t vectors = (seg.count - seg.head) / kWidth;
  const int64_t tail_start = seg.head + vectors * kWidth;
  if (block == 0) {
    const int t = threadIdx.x;
    if (t < seg.head) dst[t] = scaled ? ScaleValue<E>(src[t], scale) : src[t];
    if (t < seg.count - tail_start) {
      const int64_t i = tail_start + t;
      dst[i] = scaled ? ScaleValue<E>(src[i], scale) : src[i];
    }
  }
  StreamUnits<E>(reinterpret_cast<const Pack<T>*>(src + seg.head), reinterpret_cast<Pack<T>*>(dst + seg.head),
                 vectors, scale, scaled, block, seg.num_blocks);
}

Status LaunchError(cudaError_t err, const char* what) {
  return CudaStatus(err, std::string("CUDA ") + what + " kernel launch");
}

template <typename T>
Segment MakeSegment(const CopyDescriptor& c) {
  constexpr int64_t kWidth = kVectorBytes / sizeof(T);
  const auto src = reinterpret_cast<uintptr_t>(c.src);
  const auto dst = reinterpret_cast<uintptr_t>(c.dst);
  Segment s{};
  s.src = c.src;
  s.dst = c.dst;
  s.count = c.count;
  s.scale = c.scale;
  s.head = -1;
  int64_t units = c.count;
  if (src % kVectorBytes == dst % kVectorBytes && src % sizeof(T) == 0) {
    const int64_t head = std::min<int64_t>(c.count, (kVectorBytes - src % kVectorBytes) % kVectorBytes / sizeof(T));
    s.head = static_cast<int32_t>(head);
    units = (c.count - head) / kWidth;
  }
  const int64_t step = static_cast<int64_t>(kThreads) * kUnroll;
  s.num_blocks = static_cast<int32_t>(std::clamp<int64_t>((units + step - 1) / step, 1, kMaxBlocksPerCopy));
  return s;
}

template <typename E, int kCapacity>
Status LaunchBatches(const CopyDescriptor* copies, int64_t n, cudaStream_t stream) {
  using T = typename E::Storage;
  Batch<kCapacity> batch;
  batch.num_segments = 0;
  int32_t blocks = 0;
  auto flush = [&]() -> Status {
    if (batch.num_segments == 0) return Status::Ok();
    cudaGetLastError();  // a stale, non-sticky error of an earlier call is not this launch's
    CopyAndScaleKernel<E, kCapacity><<<blocks, kThreads, 0, stream>>>(batch);
    const cudaError_t err = cudaGetLastError();
    batch.num_segments = 0;
    blocks = 0;
    return err == cudaSuccess ? Status::Ok() : LaunchError(err, "copy-and-scale");
  };
  for (int64_t i = 0; i < n; ++i) {
    const CopyDescriptor& c = copies[i];
    if (c.count < 0) {
      return Status::InvalidArgument("CUDA copy " + std::to_string(i) + ": negative count " + std::to_string(c.count));
    }
    if (c.count == 0 || (c.src == c.dst && c.scale == 1.0)) continue;
    if (c.src == nullptr || c.dst == nullptr) {
      return Status::InvalidArgument("CUDA copy " + std::to_string(i) + ": null " + (c.src ? "destination" : "source"));
    }
    if (batch.num_segments == kCapacity) {
      const Status launched = flush();
      if (!launched.ok()) return launched;
    }
    Segment s = MakeSegment<T>(c);
    s.first_block = blocks;
    blocks += s.num_blocks;
    batch.segments[batch.num_segments++] = s;
  }
  return flush();
}

template <typename E>
Status Launch(const CopyDescriptor* copies, int64_t n, cudaStream_t stream) {
#ifdef MXPLUGIN_LARGE_LAUNCH
  if (CopiesPerLaunch() == kLargeCopiesPerLaunch) return LaunchBatches<E, kLargeCopiesPerLaunch>(copies, n, stream);
#endif
  return LaunchBatches<E, kSmallCopiesPerLaunch>(copies, n, stream);
}

}  // namespace

int CopiesPerLaunch() {
#ifdef MXPLUGIN_LARGE_LAUNCH
  // Asked once: the driver does not change under a running process.
  static const int copies = [] {
    int driver = 0;
    const bool large = cudaDriverGetVersion(&driver) == cudaSuccess && driver >= kLargeArgsDriver;
    cudaGetLastError();  // a failed query is not a later launch's error
    return large ? kLargeCopiesPerLaunch : kSmallCopiesPerLaunch;
  }();
  return copies;
#else
  return kSmallCopiesPerLaunch;
#endif
}

Status BatchedCopyAndScale(const CopyDescriptor* copies, int64_t n, DataType dtype, void* stream) {
  if (n < 0 || (n > 0 && copies == nullptr)) {
    return Status::InvalidArgument("CUDA batched copy: no descriptors (n = " + std::to_string(n) + ")");
  }
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DataType::kFloat16: return Launch<Half>(copies, n, s);
    case DataType::kBFloat16: return Launch<BFloat16>(copies, n, s);
    case DataType::kFloat32: return Launch<Plain<float, float>>(copies, n, s);
    case DataType::kFloat64: return Launch<Plain<double, double>>(copies, n, s);
    case DataType::kUInt8: return Launch<Plain<uint8_t, double>>(copies, n, s);
    case DataType::kInt8: return Launch<Plain<int8_t, double>>(copies, n, s);
    case DataType::kInt32: return Launch<Plain<int32_t, double>>(copies, n, s);
    case DataType::kInt64: return Launch<Plain<int64_t, double>>(copies, n, s);
    default: break;
  }
  return Status::InvalidArgument("CUDA scale: unsupported dtype code " + std::to_string(static_cast<int>(dtype)));
}

Status CopyAndScale(void* dst, const void* src, int64_t count, DataType dtype, double factor, void* stream) {
  const CopyDescriptor copy{src, dst, count, factor};
  return BatchedCopyAndScale(&copy, 1, dtype, stream);
}

Status ScaleInPlace(void* data, int64_t count, DataType dtype, double factor, void* stream) {
  return CopyAndScale(data, data, count, dtype, factor, stream);
}

}  // namespace cuda
}  // namespace mxplugin
