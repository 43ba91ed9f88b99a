// What the Core needs to run GPU tensors: a DeviceRuntime and a factory of
// lane communicators. DefaultGpuBackend() (src/defaults.h) is CUDA and NCCL
// in builds with MXPLUGIN_WITH_NCCL, and none otherwise; tests pass host
// stand-ins.
#pragma once

#include <memory>
#include <string>

#include "backend/gpu_communicator.h"
#include "core/device_runtime.h"

namespace mxplugin {

struct GpuBackend {
  std::shared_ptr<gpu::DeviceRuntime> runtime;  // null: GPU tensors are rejected, saying `missing`
  GpuCommunicatorFactory make_comms;
  std::string missing;
};

}  // namespace mxplugin
