// Outputs the core sizes (Note [Outputs the core sizes] in sized_output.cc):
// an allgather's or alltoall's output made once the negotiated rows are known.
#pragma once

#include "core/request.h"

namespace mxplugin {

// Sizes req's output (req.sized_output set) for the rows the response gives
// this rank (`me` of `size`), in req.output.data. Always leaves memory there,
// so that the rank takes part in the transfer; a non-ok Status (the output's
// place failed) fails the op after it.
Status SizeAllgatherOutput(Request& req, const Response& resp);
Status SizeAlltoallOutput(Request& req, const Response& resp, int me, int size);

}  // namespace mxplugin
