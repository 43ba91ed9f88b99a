#include "device.h"

#include <cuda_runtime.h>

#include <string>

namespace mxplugin {
namespace cuda {
namespace {

std::string Describe(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

}  // namespace

Status CudaStatus(int err, const std::string& what) {
  const auto code = static_cast<cudaError_t>(err);
  if (code == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(what + " failed: " + Describe(code));
}

int DeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error behind for later checks
    if (reason != nullptr) {
      *reason = err == cudaErrorInsufficientDriver
                    ? "no NVIDIA driver was found (libcuda.so.1 is missing or older than this build's CUDA runtime; " +
                          Describe(err) + ")"
                    : "cudaGetDeviceCount failed (" + Describe(err) + ")";
    }
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "the driver reports no CUDA device";
  return count;
}

Status CheckDeviceAvailable() {
  std::string reason;
  if (DeviceCount(&reason) > 0) return Status::Ok();
  return Status::Internal("no CUDA device is available to run mxplugin's CUDA kernels: " + reason);
}

Status CheckDevicePointer(const void* ptr, const char* role, int* device) {
  if (ptr == nullptr) return Status::InvalidArgument(std::string(role) + " is a null pointer");
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::InvalidArgument(std::string(role) + " is not a CUDA pointer (" + Describe(err) + ")");
  }
  if (attributes.type == cudaMemoryTypeUnregistered ||
      (attributes.type == cudaMemoryTypeHost && attributes.devicePointer == nullptr)) {
    return Status::InvalidArgument(std::string(role) +
                                   " points to host memory that the GPU cannot access; pass a device pointer");
  }
  if (device != nullptr) *device = attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
  return Status::Ok();
}

Status SynchronizeStream(void* stream) {
  const cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal("CUDA stream synchronisation failed: " + Describe(err));
}

}  // namespace cuda
}  // namespace mxplugin
