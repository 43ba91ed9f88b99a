// MXNet adapter of the fused optimizer updates: runs one update (src/optim/)
// over NDArrays as one op of MXNet's dependency engine.
#pragma once

#include <cstdint>
#include <vector>

#include "optim/update.h"

namespace mxplugin {
namespace mxnet_adapter {

// NDArrayHandles of one update. float32, default storage, CPU, all of the
// same size; no two may be (views of) the same array.
struct OptimizerArrays {
  void* weight = nullptr;     // written
  void* grad = nullptr;       // read
  std::vector<void*> states;  // written, in the op's order (optim::StateNames)
};

// Pushes one engine op that runs optim::ApplyUpdate on the arrays' data once
// every pending write to them is done; later readers of weight and states
// wait for it. `offsets`: empty for one tensor, else the LAMB segment offsets
// (optim::FlatBuffers). Throws Error(InvalidArgument) before pushing anything
// when an array or argument does not qualify; a failure on the engine thread
// surfaces as MXNetError when weight or a state is read.
void PushOptimizerUpdate(const optim::OptimizerParams& params, const OptimizerArrays& arrays,
                         std::vector<int64_t> offsets, int priority);

// One update of many parameters whose gradients and states are flat buffers
// (a trainer bucket) but whose weights are separate arrays: weight i is
// segment i, [offsets[i], offsets[i+1]) of grad and states. Weights stay
// ordinary arrays because oneDNN may reorder a weight in place (inference
// forward of a convolution), which MXNet cannot do on a view. One engine op;
// the kernel runs once per segment (so LAMB's norms are per tensor).
void PushMultiWeightUpdate(const optim::OptimizerParams& params, const std::vector<void*>& weights, void* grad,
                           const std::vector<void*>& states, std::vector<int64_t> offsets, int priority);

}  // namespace mxnet_adapter
}  // namespace mxplugin
