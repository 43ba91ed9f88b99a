// MXNet adapter: small allgathers and alltoalls of host NDArrays in one
// blocking call (Note [Host exchanges in one call] in host_exchange.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/core.h"

namespace mxplugin {
namespace mxnet_adapter {

// Runs ops[i] (allgathers, or alltoalls with their splits set; name, dtype
// and group set; shapes are read from the arrays) on the host NDArrays
// inputs[i] (NDArrayHandles) and returns, in `outputs`, new NDArrays
// (handles the caller owns, freed as MXNDArrayFree frees) on the inputs'
// contexts, holding the results; in from_each[i], the rows each rank of the
// set sent this one for ops[i]; in *exchanged_bytes, the bytes of the whole
// exchange (all ranks' rows: the same on every rank), left as it was where it
// did not take place. Blocks until done: call it without Python's lock. Throws Error
// for bad arguments and for the call's failure, which may be this rank's
// alone after the exchange (its output not made): *exchanged_bytes is set
// then too, so that every rank remembers the same bytes.
void ExchangeHost(Core* core, int process_set_id, std::vector<TensorOp> ops, const std::vector<void*>& inputs,
                  std::vector<void*>* outputs, std::vector<std::vector<int64_t>>* from_each,
                  int64_t* exchanged_bytes);

}  // namespace mxnet_adapter
}  // namespace mxplugin
