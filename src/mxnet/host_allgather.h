// MXNet adapter: small allgathers of host NDArrays in one blocking call
// (Note [Host allgathers in one call] in host_allgather.cc).
#pragma once

#include <vector>

#include "core/core.h"

namespace mxplugin {
namespace mxnet_adapter {

// Gathers every rank's rows of each host NDArray inputs[i] (NDArrayHandles)
// as allgathers ops[i] (name, dtype and group set; shapes are read from the
// arrays) and returns, in `outputs`, new NDArrays (handles the caller owns,
// freed as MXNDArrayFree frees) on the inputs' contexts, holding the result;
// returns the bytes they hold together. Blocks until done: call it without
// Python's lock. Throws Error for bad arguments and for the call's failure.
int64_t AllgatherHost(Core* core, int process_set_id, std::vector<TensorOp> ops, const std::vector<void*>& inputs,
                   std::vector<void*>* outputs);

}  // namespace mxnet_adapter
}  // namespace mxplugin
