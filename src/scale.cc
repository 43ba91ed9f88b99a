#include "scale.h"

#include <cstring>

#include "common/half.h"
#include "common/status.h"

namespace mxplugin {
namespace {

template <typename T, typename Compute>
void ScaleLoop(T* __restrict__ dst, const T* __restrict__ src, int64_t n, Compute factor) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<Compute>(src[i]) * factor);
}

// In-place variant without __restrict__ so aliasing stays legal.
template <typename T, typename Compute>
void ScaleLoopInPlace(T* data, int64_t n, Compute factor) {
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<Compute>(data[i]) * factor);
}

template <typename T, typename Compute>
void Scale(void* dst, const void* src, int64_t n, double factor) {
  if (dst == src) {
    ScaleLoopInPlace(static_cast<T*>(dst), n, static_cast<Compute>(factor));
  } else {
    ScaleLoop(static_cast<T*>(dst), static_cast<const T*>(src), n, static_cast<Compute>(factor));
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalf(void* dst, const void* src, int64_t n, double factor) {
  const auto* s = static_cast<const uint16_t*>(src);
  auto* d = static_cast<uint16_t*>(dst);
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < n; ++i) d[i] = FromFloat(ToFloat(s[i]) * f);
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
    case DataType::kFloat16: return ScaleHalf<HalfToFloat, FloatToHalf>(dst, src, count, factor);
    case DataType::kBFloat16: return ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(dst, src, count, factor);
    case DataType::kUInt8: return Scale<uint8_t, double>(dst, src, count, factor);
    case DataType::kInt8: return Scale<int8_t, double>(dst, src, count, factor);
    case DataType::kInt32: return Scale<int32_t, double>(dst, src, count, factor);
    case DataType::kInt64: return Scale<int64_t, double>(dst, src, count, factor);
  }
  throw Error(Status::InvalidArgument("scale: unsupported dtype"));
}

}  // namespace mxplugin
