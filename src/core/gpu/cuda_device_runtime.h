// DeviceRuntime over the CUDA runtime and mxplugin's kernels (cuda/).
// Compiled in every CUDA build; used by DefaultGpuBackend() in NCCL builds.
#pragma once

#include "core/device_runtime.h"

namespace mxplugin {
namespace gpu {

class CudaRuntime : public DeviceRuntime {
 public:
  int DeviceCount(std::string* reason) override;
  Status CheckPointer(const void* ptr, const std::string& role, int* owner) override;
  Status RecordReadyEvent(int device, void* stream, std::shared_ptr<void>* event) override;
  Status UseDevice(int device) override;
  bool StreamOrderedAllocation(int device) override;
  Status CreateStream(void** stream) override;
  Status DestroyStream(void* stream) override;
  Status Synchronize(void* stream) override;
  Status WaitEvent(void* stream, void* event) override;
  Status RecordEvent(void* stream, void** event) override;
  EventState QueryEvent(void* event, Status* error) override;
  Status DestroyEvent(void* event) override;
  Status Allocate(int64_t bytes, void* stream, bool stream_ordered, void** out) override;
  Status Free(void* ptr, void* stream, bool stream_ordered) override;
  Status BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype, void* stream) override;
};

}  // namespace gpu
}  // namespace mxplugin
