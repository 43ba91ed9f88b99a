#include "core/gpu/ready_event.h"

#include <cuda_runtime.h>

#include <string>

namespace mxplugin {
namespace gpu {
namespace {

Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(what + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

// Sets the current device for one scope, restoring the caller's on exit: the
// framework thread that enqueues must find its device as it left it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ThrowIfError(CudaStatus(cudaGetDevice(&previous_), "cudaGetDevice"));
    if (previous_ != device) ThrowIfError(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace

std::shared_ptr<void> RecordReadyEvent(int device, void* stream) {
  DeviceScope scope(device);
  cudaEvent_t event = nullptr;
  ThrowIfError(CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  std::shared_ptr<void> owned(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  ThrowIfError(CudaStatus(cudaEventRecord(event, static_cast<cudaStream_t>(stream)),
                          "recording the ready event on the tensor's stream"));
  return owned;
}

Status CheckDeviceMemory(const void* ptr, int device, const char* role) {
  if (ptr == nullptr) return Status::InvalidArgument(std::string(role) + " is a null pointer");
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::InvalidArgument(std::string(role) + " is not a CUDA pointer (" + cudaGetErrorName(err) + ")");
  }
  if (attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost) {
    return Status::InvalidArgument(std::string(role) + " is host memory, but the op says gpu(" +
                                   std::to_string(device) + ")");
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device) {
    return Status::InvalidArgument(std::string(role) + " lives on gpu(" + std::to_string(attributes.device) +
                                   "), but the op says gpu(" + std::to_string(device) + ")");
  }
  return Status::Ok();
}

}  // namespace gpu
}  // namespace mxplugin
