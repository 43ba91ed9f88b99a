// CPU prescale/postscale: one vectorised pass per buffer, fused into a copy
// where a copy happens anyway. float16/bfloat16 are scaled in float32;
// integers are scaled in double, truncated toward zero and saturated to the
// type's range (common/saturate.h), as on the GPU.
#pragma once

#include <cstdint>

#include "common/types.h"

namespace mxplugin {

// dst[i] = src[i] * factor. dst may equal src (scale in place). factor == 1
// degenerates to a copy (or nothing, in place).
void CopyAndScale(void* dst, const void* src, int64_t count, DataType dtype, double factor);

inline void ScaleInPlace(void* data, int64_t count, DataType dtype, double factor) {
  if (factor != 1.0) CopyAndScale(data, data, count, dtype, factor);
}

}  // namespace mxplugin
