// MXNet adapter: turns NDArrays into TensorRefs and runs a group of
// collectives as one asynchronous op of MXNet's dependency engine.
#pragma once

#include <vector>

#include "core/core.h"

namespace mxplugin {
namespace mxnet_adapter {

// `inputs`/`outputs` are NDArrayHandles (an output may equal its input: in
// place). Inputs become read dependencies, outputs write dependencies; the
// engine op completes (with an error, if any) from the core's background
// thread. ops[i] with of_array[i] take dtype and shape from inputs[i] (its
// output must have that shape). Throws Error for bad arguments before
// anything is pushed.
void PushCollective(Core* core, int process_set_id, std::vector<TensorOp> ops,
                    const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                    const std::vector<bool>& of_array, int priority);

}  // namespace mxnet_adapter
}  // namespace mxplugin
