// C entry points of the CUDA kernels on raw device pointers; statuses and
// C++ exceptions become codes here, recorded through c_api.h's
// mxp_set_last_error. Compiled in every build: without MXPLUGIN_WITH_CUDA
// each entry reports that CUDA was not built in.
#include "c_api_cuda.h"

#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "c_api.h"
#include "c_api_guard.h"
#include "common/status.h"
#include "common/types.h"

#ifdef MXPLUGIN_WITH_CUDA
#include "cuda/device.h"
#include "cuda/scale_kernels.h"
#endif

using mxplugin::Error;
using mxplugin::Status;

namespace {

using mxplugin::capi::Guard;

#ifdef MXPLUGIN_WITH_CUDA

mxplugin::DataType CheckedDataType(int32_t dtype) {
  if (!mxplugin::IsValidDataType(dtype)) {
    throw Error(Status::InvalidArgument("unsupported dtype code " + std::to_string(dtype)));
  }
  return static_cast<mxplugin::DataType>(dtype);
}

void Check(const Status& s) { mxplugin::ThrowIfError(s); }

// One copy's arguments, before any device is asked: a pointer not aligned to
// its element size would make the kernel fault, which loses the CUDA context
// for the whole process.
void CheckCopyArguments(const mxp_cuda_copy& c, mxplugin::DataType dtype, const std::string& what) {
  if (c.count < 0) throw Error(Status::InvalidArgument(what + ": negative count " + std::to_string(c.count)));
  if (c.count == 0) return;
  const size_t esize = mxplugin::DataTypeSize(dtype);
  for (const auto& part : {std::make_pair(c.src, "source"), std::make_pair(static_cast<const void*>(c.dst),
                                                                           "destination")}) {
    if (reinterpret_cast<uintptr_t>(part.first) % esize != 0) {
      std::ostringstream at;
      at << part.first;
      throw Error(Status::InvalidArgument(what + " " + part.second + ": " + at.str() + " is not aligned to " +
                                          mxplugin::DataTypeName(dtype) + "'s " + std::to_string(esize) +
                                          "-byte elements"));
    }
  }
}

// One copy's pointers, before anything is launched, so a host pointer is an
// error here instead of a fault in the kernel.
void CheckCopyPointers(const mxp_cuda_copy& c, const std::string& what) {
  if (c.count == 0) return;
  Check(mxplugin::cuda::CheckDevicePointer(c.src, (what + " source").c_str()));
  Check(mxplugin::cuda::CheckDevicePointer(c.dst, (what + " destination").c_str()));
}

#else

Status NotBuilt() {
  return Status::Internal(
      "mxplugin was built without CUDA: rebuild it where nvcc is found (on PATH, or under $CUDA_HOME) or with "
      "MXPLUGIN_WITH_CUDA=1; mxplugin-run --check-build shows what was built");
}

#endif

}  // namespace

extern "C" {

int mxp_cuda_device_count(int32_t* out) {
  return Guard([&] {
#ifdef MXPLUGIN_WITH_CUDA
    std::string reason;
    *out = mxplugin::cuda::DeviceCount(&reason);
    if (*out == 0) mxp_set_last_error(0, reason.c_str());
    return Status::Ok();
#else
    *out = 0;
    return NotBuilt();
#endif
  });
}

int mxp_cuda_batched_copy(const mxp_cuda_copy* copies, int32_t n, int32_t dtype, void* stream) {
  return Guard([&] {
#ifdef MXPLUGIN_WITH_CUDA
    const mxplugin::DataType type = CheckedDataType(dtype);
    if (n < 0 || (n > 0 && copies == nullptr)) {
      return Status::InvalidArgument("batched copy: " + std::to_string(n) + " copies at " +
                                     (copies ? "a valid" : "a null") + " address");
    }
    for (int32_t i = 0; i < n; ++i) CheckCopyArguments(copies[i], type, "copy " + std::to_string(i));
    Check(mxplugin::cuda::CheckDeviceAvailable());
    std::vector<mxplugin::cuda::CopyDescriptor> descriptors(n);
    for (int32_t i = 0; i < n; ++i) {
      CheckCopyPointers(copies[i], "copy " + std::to_string(i));
      descriptors[i] = {copies[i].src, copies[i].dst, copies[i].count, copies[i].scale};
    }
    return mxplugin::cuda::BatchedCopyAndScale(descriptors.data(), n, type, stream);
#else
    return NotBuilt();
#endif
  });
}

int mxp_cuda_copy_and_scale(void* dst, const void* src, int64_t count, int32_t dtype, double factor, void* stream) {
  const mxp_cuda_copy copy{src, dst, count, factor};
  return mxp_cuda_batched_copy(&copy, 1, dtype, stream);
}

int mxp_cuda_scale(void* data, int64_t count, int32_t dtype, double factor, void* stream) {
  return mxp_cuda_copy_and_scale(data, data, count, dtype, factor, stream);
}

int mxp_cuda_synchronize(void* stream) {
  return Guard([&] {
#ifdef MXPLUGIN_WITH_CUDA
    Check(mxplugin::cuda::CheckDeviceAvailable());
    return mxplugin::cuda::SynchronizeStream(stream);
#else
    return NotBuilt();
#endif
  });
}

}  // extern "C"
