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
// framework thread that enqueues must find its device as it left it. Nothing
// is switched (or restored) when the device is current already, the usual
// case, since the caller produced the tensor there.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ThrowIfError(CudaStatus(cudaGetDevice(&previous_), "cudaGetDevice"));
    if (previous_ != device) {
      ThrowIfError(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
      switched_ = true;
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace

std::shared_ptr<void> RecordReadyEvent(int device, void* stream) {
  DeviceScope scope(device);
  cudaEvent_t event = nullptr;
  ThrowIfError(CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  // Freed on whichever thread drops the last reference, on the event's device.
  std::shared_ptr<void> owned(event, [device](void* e) {
    try {
      DeviceScope at(device);
      cudaEventDestroy(static_cast<cudaEvent_t>(e));
    } catch (const Error&) {
      cudaEventDestroy(static_cast<cudaEvent_t>(e));
    }
  });
  ThrowIfError(CudaStatus(cudaEventRecord(event, static_cast<cudaStream_t>(stream)),
                          "recording the ready event on the tensor's stream"));
  return owned;
}

bool UseDevice(int device) { return cudaSetDevice(device) == cudaSuccess; }

}  // namespace gpu
}  // namespace mxplugin
