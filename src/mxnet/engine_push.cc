#include "mxnet/engine_push.h"

namespace mxplugin {
namespace mxnet_adapter {

void PushAsync(EngineAsyncFunc run, void* param, EngineFuncParamDeleter deleter, const ::mxnet::Context& ctx,
               std::vector<NDArrayHandle> reads, std::vector<NDArrayHandle> writes, int priority,
               const char* name, ::mxnet::FnProperty property) {
  ::mxnet::Context context = ctx;
  int rc = MXEnginePushAsyncND(run, param, deleter, &context, reads.data(), static_cast<int>(reads.size()),
                               writes.data(), static_cast<int>(writes.size()), &property, priority, name, false);
  if (rc != 0) {
    // Not freed here: MXNet may already own `param` (it wraps it before pushing).
    throw Error(Status::Internal(std::string("MXEnginePushAsyncND failed: ") + MXGetLastError()));
  }
}

void Complete(const ::mxnet::engine::CallbackOnComplete& on_complete, const Status& status) {
  if (status.ok()) {
    on_complete();
  } else {
    dmlc::Error error(status.reason());
    on_complete(&error);
  }
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
