// The GPU pieces Core::Enqueue needs on the framework's thread, before a GPU
// op is queued. Defined only in builds with MXPLUGIN_WITH_NCCL.
#pragma once

#include <memory>

#include "common/status.h"

namespace mxplugin {
namespace gpu {

// A cudaEvent_t recorded now on `stream` of `device`: it completes once the
// work queued there so far has run. The calling thread's current device is
// restored afterwards. The event is destroyed with the last reference.
// Throws Error when CUDA fails.
std::shared_ptr<void> RecordReadyEvent(int device, void* stream);

// Makes `device` current on the calling (internal) thread, for good: returns
// false when CUDA refuses.
bool UseDevice(int device);

}  // namespace gpu
}  // namespace mxplugin
