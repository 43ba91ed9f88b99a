// MXNet adapter: small allgathers and alltoalls of host NDArrays in one
// blocking call (Note [Host exchanges in one call] in host_exchange.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/core.h"

namespace mxplugin {
namespace mxnet_adapter {

// Runs ops[i] (allgathers, or alltoalls with their splits set, or left
// empty for equal blocks; name and group set; dtypes and shapes are read
// from the arrays) on the host NDArrays inputs[i] (NDArrayHandles) of a
// process set of set_size ranks, and returns true with, in `outputs`, new
// NDArrays (handles the caller owns, freed as MXNDArrayFree frees) on the
// inputs' contexts, holding the results; in from_each[i], the rows each rank
// of the set sent this one for ops[i]; in *exchanged_bytes, the bytes of the
// whole exchange (all ranks' rows: the same on every rank), left as it was
// where it did not take place. Returns false, having submitted nothing,
// where it declines the call: an input that is not a dense host array of at
// least one dimension whose dtype the core takes, or alltoall splits that
// do not cover its rows (the caller's other path checks them and names what
// is wrong). Blocks until done: call it without Python's lock. Throws Error
// for the call's failure, which may be this rank's alone after the exchange
// (its output not made): *exchanged_bytes is set then too, so that every
// rank remembers the same bytes.
bool ExchangeHost(Core* core, int process_set_id, int set_size, std::vector<TensorOp> ops,
                  const std::vector<void*>& inputs, std::vector<void*>* outputs,
                  std::vector<std::vector<int64_t>>* from_each, int64_t* exchanged_bytes);

}  // namespace mxnet_adapter
}  // namespace mxplugin
