// The device calls of the Core and its GPU executor, behind one interface:
// CudaRuntime (core/gpu/cuda_device_runtime.cc, NCCL builds) makes them with the
// CUDA runtime; the host tests (tests/native/) run the same code on host
// memory with a stand-in. Streams, events and buffers are opaque pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/types.h"
#include "cuda/scale_kernels.h"

namespace mxplugin {
namespace gpu {

enum class EventState { kDone, kPending, kFailed };

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Called on framework threads, at enqueue:
  // Devices usable here; 0 with *reason saying why when there are none.
  virtual int DeviceCount(std::string* reason) = 0;
  // Ok when kernels may use `ptr`; *owner gets its device (-1: host-mapped
  // or managed). `role` names the pointer in the error.
  virtual Status CheckPointer(const void* ptr, const std::string& role, int* owner) = 0;
  // An event recorded on `stream` of `device` now, freed with the last
  // reference (on any thread); the caller's current device is kept.
  virtual Status RecordReadyEvent(int device, void* stream, std::shared_ptr<void>* event) = 0;

  // Called on the Core's threads:

  // Makes `device` current on the calling thread.
  virtual Status UseDevice(int device) = 0;
  // Whether Allocate/Free may be stream-ordered on `device`.
  virtual bool StreamOrderedAllocation(int device) = 0;
  // A non-blocking stream of the highest priority on the current device.
  virtual Status CreateStream(void** stream) = 0;
  virtual Status DestroyStream(void* stream) = 0;
  virtual Status Synchronize(void* stream) = 0;
  // Work queued on `stream` from now on waits for `event`.
  virtual Status WaitEvent(void* stream, void* event) = 0;
  // A new event, recorded on `stream`: done once the work queued so far is.
  virtual Status RecordEvent(void* stream, void** event) = 0;
  // kFailed sets *error to the failure of the work the event marks.
  virtual EventState QueryEvent(void* event, Status* error) = 0;
  virtual Status DestroyEvent(void* event) = 0;
  // Device memory; `stream_ordered` queues the allocation/free on `stream`.
  virtual Status Allocate(int64_t bytes, void* stream, bool stream_ordered, void** out) = 0;
  virtual Status Free(void* ptr, void* stream, bool stream_ordered) = 0;
  // cuda::BatchedCopyAndScale's contract (cuda/scale_kernels.h).
  virtual Status BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype,
                                     void* stream) = 0;
};

}  // namespace gpu
}  // namespace mxplugin
