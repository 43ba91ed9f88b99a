// Elementwise reduction of two host buffers, for every dtype and reduce op:
// acc[i] = acc[i] (op) in[i]. Half types widen to float in chunks and round
// once per element (Note [Half reductions] in backend/mpi/mpi_world.cc).
// Used wherever mxplugin reduces on the CPU itself: MPI's user ops for the
// half types, the shared-memory allreduce and the in-memory test world.
#pragma once

#include <cstdint>

#include "common/types.h"

namespace mxplugin {

// Average reduces as Sum (its 1/size is a postscale).
void ReduceInto(void* acc, const void* in, int64_t count, DataType dtype, ReduceOp op);
// out[i] = a[i] (op) b[i]; out may be a or b.
void ReduceTo(void* out, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op);
// out = ((terms[0] op terms[1]) op terms[2]) ...: the one order of every
// reduction mxplugin makes (Note [Fixed reduction order] in
// backend/mpi/ordered_reduce.cc). out may be terms[0] or terms[1].
void ReduceInRankOrder(void* out, const void* const* terms, int n, int64_t count, DataType dtype, ReduceOp op);

}  // namespace mxplugin
