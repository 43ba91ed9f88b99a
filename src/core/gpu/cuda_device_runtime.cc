#include "core/gpu/cuda_device_runtime.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/device.h"

namespace mxplugin {
namespace gpu {
namespace {

using cuda::CudaStatus;

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// Sets the current device for one scope, restoring the caller's on exit: the
// framework thread that enqueues must find its device as it left it. Nothing
// is switched (or restored) when the device is current already, the usual
// case, since the caller produced the tensor there.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    status_ = CudaStatus(cudaGetDevice(&previous_), "cudaGetDevice");
    if (status_.ok() && previous_ != device) {
      status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
      switched_ = status_.ok();
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  const Status& status() const { return status_; }

 private:
  Status status_;
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace

int CudaRuntime::DeviceCount(std::string* reason) { return cuda::DeviceCount(reason); }

Status CudaRuntime::CheckPointer(const void* ptr, const std::string& role, int* owner) {
  return cuda::CheckDevicePointer(ptr, role.c_str(), owner);
}

Status CudaRuntime::RecordReadyEvent(int device, void* stream, std::shared_ptr<void>* event) {
  DeviceScope scope(device);
  if (!scope.status().ok()) return scope.status();
  cudaEvent_t e = nullptr;
  Status st = CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  if (!st.ok()) return st;
  // Freed on whichever thread drops the last reference, on the event's device.
  std::shared_ptr<void> owned(e, [device](void* p) {
    DeviceScope at(device);
    cudaEventDestroy(static_cast<cudaEvent_t>(p));
  });
  st = CudaStatus(cudaEventRecord(e, AsStream(stream)), "recording the ready event on the tensor's stream");
  if (st.ok()) *event = std::move(owned);
  return st;
}

Status CudaRuntime::UseDevice(int device) { return CudaStatus(cudaSetDevice(device), "cudaSetDevice"); }

bool CudaRuntime::StreamOrderedAllocation(int device) {
  int pools = 0;
  return cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess && pools != 0;
}

// Communication streams get the highest priority, so that reductions are not
// queued behind the backward pass's kernels; non-blocking, so that they do
// not wait for the legacy default stream.
Status CudaRuntime::CreateStream(void** stream) {
  *stream = nullptr;
  int least = 0, greatest = 0;
  Status st = CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  if (!st.ok()) return st;
  cudaStream_t s = nullptr;
  st = CudaStatus(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  if (st.ok()) *stream = s;
  return st;
}

Status CudaRuntime::DestroyStream(void* stream) {
  return CudaStatus(cudaStreamDestroy(AsStream(stream)), "cudaStreamDestroy");
}

Status CudaRuntime::Synchronize(void* stream) {
  return CudaStatus(cudaStreamSynchronize(AsStream(stream)), "cudaStreamSynchronize");
}

Status CudaRuntime::WaitEvent(void* stream, void* event) {
  return CudaStatus(cudaStreamWaitEvent(AsStream(stream), static_cast<cudaEvent_t>(event), 0),
                    "waiting for the tensor's producer (cudaStreamWaitEvent)");
}

Status CudaRuntime::RecordEvent(void* stream, void** event) {
  cudaEvent_t e = nullptr;
  Status st = CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  if (st.ok()) st = CudaStatus(cudaEventRecord(e, AsStream(stream)), "cudaEventRecord");
  if (!st.ok() && e != nullptr) {
    cudaEventDestroy(e);
    e = nullptr;
  }
  *event = e;
  return st;
}

EventState CudaRuntime::QueryEvent(void* event, Status* error) {
  const cudaError_t state = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (state == cudaSuccess) return EventState::kDone;
  if (state == cudaErrorNotReady) return EventState::kPending;
  *error = CudaStatus(state, "a GPU collective");
  return EventState::kFailed;
}

Status CudaRuntime::DestroyEvent(void* event) {
  return CudaStatus(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
}

Status CudaRuntime::Allocate(int64_t bytes, void* stream, bool stream_ordered, void** out) {
  *out = nullptr;
  if (stream_ordered) {
    return CudaStatus(cudaMallocAsync(out, static_cast<size_t>(bytes), AsStream(stream)),
                      "allocating the GPU fusion buffer (cudaMallocAsync)");
  }
  return CudaStatus(cudaMalloc(out, static_cast<size_t>(bytes)), "allocating the GPU fusion buffer (cudaMalloc)");
}

Status CudaRuntime::Free(void* ptr, void* stream, bool stream_ordered) {
  if (stream_ordered) {
    return CudaStatus(cudaFreeAsync(ptr, AsStream(stream)), "freeing the GPU fusion buffer (cudaFreeAsync)");
  }
  return CudaStatus(cudaFree(ptr), "freeing the GPU fusion buffer (cudaFree)");
}

Status CudaRuntime::BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype,
                                        void* stream) {
  return cuda::BatchedCopyAndScale(copies, n, dtype, stream);
}

}  // namespace gpu
}  // namespace mxplugin
