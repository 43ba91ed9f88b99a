#include "defaults.h"

#include "backend/mpi/mpi_world.h"
#ifdef MXPLUGIN_WITH_NCCL
#include "backend/nccl/nccl_communicator.h"
#include "core/gpu/cuda_device_runtime.h"
#endif

namespace mxplugin {

WorldFactory DefaultWorld() { return &MakeMpiWorld; }

GpuBackend DefaultGpuBackend() {
  GpuBackend backend;
#ifdef MXPLUGIN_WITH_NCCL
  backend.runtime = std::make_shared<gpu::CudaRuntime>();
  backend.make_comms = &NcclCommunicator::CreateMany;
#else
  backend.missing =
      "this build of mxplugin has no NCCL backend and runs collectives on CPU memory only; rebuild with CUDA and "
      "NCCL (mxplugin-run --check-build says why they were left out)";
#endif
  return backend;
}

}  // namespace mxplugin
