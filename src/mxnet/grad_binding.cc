#include "mxnet/grad_binding.h"

#include <mxnet/c_api.h>
#include <mxnet/ndarray.h>

#include <string>

#include "common/status.h"

namespace mxplugin {
namespace mxnet_adapter {

namespace {

bool SameArray(const ::mxnet::NDArray& a, const ::mxnet::NDArray& b) {
  return a.var() == b.var() && a.byte_offset() == b.byte_offset() && a.shape() == b.shape();
}

}  // namespace

void GradientsBound(void* const* weights, void* const* grads, int32_t n, int32_t* bound) {
  for (int32_t i = 0; i < n; ++i) {
    // Through the C API: NDArray::grad() is not exported from libmxnet.
    NDArrayHandle attached = nullptr;
    if (MXNDArrayGetGrad(weights[i], &attached) != 0) {
      throw Error(Status::Internal(std::string("MXNDArrayGetGrad failed: ") + MXGetLastError()));
    }
    if (attached == nullptr) {
      bound[i] = 0;
      continue;
    }
    bound[i] = SameArray(*static_cast<const ::mxnet::NDArray*>(attached),
                         *static_cast<const ::mxnet::NDArray*>(grads[i]));
    MXNDArrayFree(attached);
  }
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
