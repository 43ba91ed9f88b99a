// How a scaled integer is stored, on both devices: the product is computed in
// double, rounded toward zero and saturated to the type's range (NaN gives 0).
// One definition for the CPU path (src/common/scale.cc) and the CUDA kernels
// (cuda/scale_kernels.cu); without it the CPU's out-of-range conversion is
// undefined behaviour (x86 gives the minimum) while CUDA's saturates.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MXP_HOST_DEVICE __host__ __device__
#else
#define MXP_HOST_DEVICE
#endif

namespace mxplugin {

// The range of each integer dtype, as literals usable in device code.
template <typename T>
struct IntegerRange;
template <>
struct IntegerRange<uint8_t> {
  static constexpr uint8_t kMin = 0, kMax = UINT8_MAX;
};
template <>
struct IntegerRange<int8_t> {
  static constexpr int8_t kMin = INT8_MIN, kMax = INT8_MAX;
};
template <>
struct IntegerRange<int32_t> {
  static constexpr int32_t kMin = INT32_MIN, kMax = INT32_MAX;
};
template <>
struct IntegerRange<int64_t> {
  static constexpr int64_t kMin = INT64_MIN, kMax = INT64_MAX;
};

template <typename T>
MXP_HOST_DEVICE inline T SaturateToInteger(double v) {
  if (v != v) return 0;  // NaN
  // The bounds as doubles: kMax of int64 rounds up to 2^63, so `>=` catches
  // every value that does not fit; every double below it converts exactly.
  if (v <= static_cast<double>(IntegerRange<T>::kMin)) return IntegerRange<T>::kMin;
  if (v >= static_cast<double>(IntegerRange<T>::kMax)) return IntegerRange<T>::kMax;
  return static_cast<T>(v);
}

}  // namespace mxplugin
