// CUDA runtime queries for code outside cuda/, without CUDA headers (streams
// are `void*`). Defined only in builds with MXPLUGIN_WITH_CUDA.
#pragma once

#include <string>

#include "common/status.h"

namespace mxplugin {
namespace cuda {

// Number of devices kernels can run on: 0 when there is no GPU or no NVIDIA
// driver (libcuda.so.1), in which case *reason (if given) says which.
int DeviceCount(std::string* reason = nullptr);

// Ok when a kernel can run; otherwise an error that says why not.
Status CheckDeviceAvailable();

// Ok when a kernel may dereference `ptr` (device, managed or mapped host
// memory); `role` names the pointer in the error. `device`, when given,
// receives the GPU that owns device memory (-1 for managed or mapped memory).
Status CheckDevicePointer(const void* ptr, const char* role, int* device = nullptr);

// Waits for the work queued on `stream`; returns the first error of that work.
Status SynchronizeStream(void* stream);

}  // namespace cuda
}  // namespace mxplugin
