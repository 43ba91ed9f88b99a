// What every MXNet engine op of mxplugin shares: pushing it with
// MXEnginePushAsyncND, and completing it with a Status.
#pragma once

#include <mxnet/c_api.h>
#include <mxnet/engine.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace mxplugin {
namespace mxnet_adapter {

// Pushes `run(run_context, on_complete, param)` as one asynchronous engine op
// reading `reads` and writing `writes` (disjoint). The engine owns `param`
// from here on and frees it with `deleter` after completion. Throws Error if
// the push fails (`param` may then leak; MXNet may already have freed it).
// `property`: kNormal runs it on one of the engine's workers; kAsync runs it
// at once on the pushing thread when its inputs are ready then (else on a
// worker, once they are), for ops that only hand work on (Note [Collectives
// run where they are pushed] in engine_op.cc).
void PushAsync(EngineAsyncFunc run, void* param, EngineFuncParamDeleter deleter, const ::mxnet::Context& ctx,
               std::vector<NDArrayHandle> reads, std::vector<NDArrayHandle> writes, int priority,
               const char* name, ::mxnet::FnProperty property = ::mxnet::FnProperty::kNormal);

// Completes an engine op: a non-ok status becomes a dmlc::Error, which MXNet
// raises as MXNetError where the op's outputs are read.
void Complete(const ::mxnet::engine::CallbackOnComplete& on_complete, const Status& status);

}  // namespace mxnet_adapter
}  // namespace mxplugin
