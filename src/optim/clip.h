// Clipping as MXNet's mshadow_op::clip::Map does it (NaN passes through),
// and the hoisting of "clip or not" out of the kernels' loops.
#pragma once

#include <type_traits>

namespace mxplugin {
namespace optim {

inline float Clip(float x, float bound) { return x > bound ? bound : (x < -bound ? -bound : x); }

template <bool kClip>
inline float MaybeClip(float x, float bound) {
  if constexpr (kClip) {
    return Clip(x, bound);
  } else {
    return x;
  }
}

// Calls loop(std::true_type) when bound >= 0 (MXNet's "clipping on"), else
// loop(std::false_type): one branch per call, none per element.
template <typename Loop>
void WithClip(float bound, Loop&& loop) {
  if (bound >= 0.f) {
    loop(std::true_type());
  } else {
    loop(std::false_type());
  }
}

}  // namespace optim
}  // namespace mxplugin
