// The device calls of the GPU executor, behind one interface: CudaRuntime
// (cuda_runtime.cc) makes them with the CUDA runtime; the executor's host
// test (tests/native/) runs the same executor on host memory with a
// stand-in. Streams, events and buffers are opaque pointers.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/types.h"
#include "cuda/scale_kernels.h"

namespace mxplugin {
namespace gpu {

enum class EventState { kDone, kPending, kFailed };

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Makes `device` current on the calling thread.
  virtual Status UseDevice(int device) = 0;
  // Whether Allocate/Free may be stream-ordered on `device`.
  virtual bool StreamOrderedAllocation(int device) = 0;
  // A non-blocking stream of the highest priority on the current device.
  virtual Status CreateStream(void** stream) = 0;
  virtual void DestroyStream(void* stream) = 0;
  virtual Status Synchronize(void* stream) = 0;
  // Work queued on `stream` from now on waits for `event`.
  virtual Status WaitEvent(void* stream, void* event) = 0;
  // A new event, recorded on `stream`: done once the work queued so far is.
  virtual Status RecordEvent(void* stream, void** event) = 0;
  // kFailed sets *error to the failure of the work the event marks.
  virtual EventState QueryEvent(void* event, Status* error) = 0;
  virtual void DestroyEvent(void* event) = 0;
  // Device memory; `stream_ordered` queues the allocation/free on `stream`.
  virtual Status Allocate(int64_t bytes, void* stream, bool stream_ordered, void** out) = 0;
  virtual void Free(void* ptr, void* stream, bool stream_ordered) = 0;
  // cuda::BatchedCopyAndScale's contract (cuda/scale_kernels.h).
  virtual Status BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype,
                                     void* stream) = 0;
};

}  // namespace gpu
}  // namespace mxplugin
