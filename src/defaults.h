// The composition root: the one place that decides what the Core is built
// from in a real run (the core itself sees only interfaces). Used by c_api.cc.
#pragma once

#include "backend/world.h"
#include "core/gpu_backend.h"

namespace mxplugin {

// MPI_COMM_WORLD (backend/mpi/mpi_world.h).
WorldFactory DefaultWorld();
// CUDA and NCCL in builds with MXPLUGIN_WITH_NCCL; otherwise none, saying why.
GpuBackend DefaultGpuBackend();

}  // namespace mxplugin
