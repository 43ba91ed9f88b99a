#include "common/scale.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "common/half_vector.h"
#include "common/saturate.h"
#include "common/status.h"

namespace mxplugin {
namespace {

// Floating-point results convert as usual; integers saturate (common/saturate.h).
template <typename T, typename Compute>
inline T Store(Compute v) {
  if constexpr (std::is_integral_v<T>) {
    return SaturateToInteger<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

template <typename T, typename Compute>
void ScaleLoop(T* __restrict__ dst, const T* __restrict__ src, int64_t n, Compute factor) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Store<T>(static_cast<Compute>(src[i]) * factor);
}

// In-place variant without __restrict__ so aliasing stays legal.
template <typename T, typename Compute>
void ScaleLoopInPlace(T* data, int64_t n, Compute factor) {
  for (int64_t i = 0; i < n; ++i) data[i] = Store<T>(static_cast<Compute>(data[i]) * factor);
}

template <typename T, typename Compute>
void Scale(void* dst, const void* src, int64_t n, double factor) {
  if (dst == src) {
    ScaleLoopInPlace(static_cast<T*>(dst), n, static_cast<Compute>(factor));
  } else {
    ScaleLoop(static_cast<T*>(dst), static_cast<const T*>(src), n, static_cast<Compute>(factor));
  }
}

void ScaleFloat16(void* dst, const void* src, int64_t n, double factor) {
  const auto* s = static_cast<const uint16_t*>(src);
  auto* d = static_cast<uint16_t*>(dst);
  const float f = static_cast<float>(factor);
  float wide[kHalfChunk];
  for (int64_t start = 0; start < n; start += kHalfChunk) {
    const int64_t len = std::min(kHalfChunk, n - start);
    HalfToFloatN(s + start, wide, len);
    for (int64_t i = 0; i < len; ++i) wide[i] *= f;
    FloatToHalfN(wide, d + start, len);
  }
}

void ScaleBFloat16(void* dst, const void* src, int64_t n, double factor) {
  const auto* s = static_cast<const uint16_t*>(src);
  auto* d = static_cast<uint16_t*>(dst);
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < n; ++i) d[i] = FloatToBFloat16(BFloat16ToFloat(s[i]) * f);
}

}  // namespace

void CopyAndScale(void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(count) * DataTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kFloat32: return Scale<float, float>(dst, src, count, factor);
    case DataType::kFloat64: return Scale<double, double>(dst, src, count, factor);
    case DataType::kFloat16: return ScaleFloat16(dst, src, count, factor);
    case DataType::kBFloat16: return ScaleBFloat16(dst, src, count, factor);
    case DataType::kUInt8: return Scale<uint8_t, double>(dst, src, count, factor);
    case DataType::kInt8: return Scale<int8_t, double>(dst, src, count, factor);
    case DataType::kInt32: return Scale<int32_t, double>(dst, src, count, factor);
    case DataType::kInt64: return Scale<int64_t, double>(dst, src, count, factor);
  }
  throw Error(Status::InvalidArgument("scale: unsupported dtype"));
}

}  // namespace mxplugin
