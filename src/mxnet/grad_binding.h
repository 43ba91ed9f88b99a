// Which gradient array autograd really writes for a weight: the check behind
// the trainer's zero-copy buckets (Note [Static graphs keep their gradients]
// in mxplugin/training/buckets.py).
#pragma once

#include <cstdint>

namespace mxplugin {
namespace mxnet_adapter {

// For each i, whether the gradient autograd holds for weights[i] (the array
// the last backward wrote) is grads[i]: the same engine variable (storage),
// byte offset and shape. Reads only bookkeeping, never data, so it neither
// waits on the engine nor touches oneDNN layouts. A weight with no gradient
// attached reads as not bound.
void GradientsBound(void* const* weights, void* const* grads, int32_t n, int32_t* bound);

}  // namespace mxnet_adapter
}  // namespace mxplugin
