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

}  // namespace mxnet_adapter
}  // namespace mxplugin
