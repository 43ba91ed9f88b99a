#include "core/gpu/cuda_runtime.h"

#include <cuda_runtime.h>

#include <string>

namespace mxplugin {
namespace gpu {
namespace {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(std::string(what) + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

Status CudaRuntime::UseDevice(int device) { return CudaStatus(cudaSetDevice(device), "cudaSetDevice"); }

bool CudaRuntime::StreamOrderedAllocation(int device) {
  int pools = 0;
  return cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess && pools != 0;
}

// Communication streams get the highest priority, so that reductions are not
// queued behind the backward pass's kernels; non-blocking, so that they do
// not wait for the legacy default stream.
Status CudaRuntime::CreateStream(void** stream) {
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStream_t s = nullptr;
  Status st = CudaStatus(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  *stream = s;
  return st;
}

void CudaRuntime::DestroyStream(void* stream) { cudaStreamDestroy(AsStream(stream)); }

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

void CudaRuntime::DestroyEvent(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

Status CudaRuntime::Allocate(int64_t bytes, void* stream, bool stream_ordered, void** out) {
  *out = nullptr;
  if (stream_ordered) {
    return CudaStatus(cudaMallocAsync(out, static_cast<size_t>(bytes), AsStream(stream)),
                      "allocating the GPU fusion buffer (cudaMallocAsync)");
  }
  return CudaStatus(cudaMalloc(out, static_cast<size_t>(bytes)), "allocating the GPU fusion buffer (cudaMalloc)");
}

void CudaRuntime::Free(void* ptr, void* stream, bool stream_ordered) {
  if (stream_ordered) {
    cudaFreeAsync(ptr, AsStream(stream));
  } else {
    cudaFree(ptr);
  }
}

Status CudaRuntime::BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype,
                                        void* stream) {
  return cuda::BatchedCopyAndScale(copies, n, dtype, stream);
}

}  // namespace gpu
}  // namespace mxplugin
