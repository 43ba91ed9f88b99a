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

// The one conversion of a CUDA runtime error code (a cudaError_t) into a
// Status: Ok for cudaSuccess, else Internal "<what> failed: <name>: <text>".
// Clears the thread's last error, so a non-sticky failure is not reported
// again by a later, unrelated check.
Status CudaStatus(int err, const std::string& what);

}  // namespace cuda
}  // namespace mxplugin
