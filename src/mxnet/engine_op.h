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
// output must have that shape, or be its block for a reducescatter). A null
// outputs[i] of such a reducescatter is made here (Note [Outputs made at
// push] in engine_op.cc): (*made)[i] is then its handle, which the caller
// owns (null where outputs[i] was given). Throws Error for bad arguments
// before anything is pushed.
void PushCollective(Core* core, int process_set_id, std::vector<TensorOp> ops,
                    const std::vector<void*>& inputs, std::vector<void*> outputs,
                    const std::vector<bool>& of_array, int priority, std::vector<void*>* made = nullptr);

}  // namespace mxnet_adapter
}  // namespace mxplugin
