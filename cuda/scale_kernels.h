// Host API of the CUDA scale and copy kernels (cuda/scale_kernels.cu):
// prescale/postscale of a fused buffer, and the batched copy of many tensors
// into and out of it with the scaling done on the way.
//
// Callers need no CUDA headers: streams are `void*` (a cudaStream_t; nullptr
// is the legacy default stream), pointers are device pointers. Every function
// only enqueues work on `stream` and returns once the launches are checked
// (cudaGetLastError); faults while the kernel runs surface at the next
// synchronisation of the stream. Defined only in builds with
// MXPLUGIN_WITH_CUDA; callers guard their calls with that macro.
//
// Arithmetic matches the CPU path (src/common/scale.h): float16/bfloat16 are scaled
// in float32 and rounded to nearest even, float32 in float32, float64 in
// float64, integers in float64 and truncated toward zero.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/types.h"

namespace mxplugin {
namespace cuda {

// One tensor of a batched copy: dst[i] = src[i] * scale for i < count.
// src == dst scales in place; other overlaps are not allowed.
struct CopyDescriptor {
  const void* src;
  void* dst;
  int64_t count;
  double scale;
};

// dst[i] = src[i] * factor. dst may equal src. factor == 1 is a plain copy
// (nothing at all in place).
Status CopyAndScale(void* dst, const void* src, int64_t count, DataType dtype, double factor, void* stream);

// data[i] *= factor; nothing is launched when factor == 1.
Status ScaleInPlace(void* data, int64_t count, DataType dtype, double factor, void* stream);

// Every descriptor's copy, all of one dtype, in as few launches as the kernel
// parameter space allows (CopiesPerLaunch() descriptors each). The
// descriptors are read on the host during the call and need not outlive it.
Status BatchedCopyAndScale(const CopyDescriptor* copies, int64_t n, DataType dtype, void* stream);

// How many descriptors one launch of the batched kernel carries (they travel
// as a kernel argument): 600 where the build and the driver allow 32,764
// bytes of arguments, else 64, within the 4 KiB every driver accepts
// (Note [Descriptors per launch] in scale_kernels.cu).
int CopiesPerLaunch();

}  // namespace cuda
}  // namespace mxplugin
