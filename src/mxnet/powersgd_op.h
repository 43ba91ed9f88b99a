// MXNet adapter of PowerSGD's passes (src/compress/powersgd.h): one stage
// over many gradients as one op of MXNet's dependency engine.
#pragma once

#include <vector>

#include "compress/powersgd.h"

namespace mxplugin {
namespace mxnet_adapter {

// NDArrayHandles of one gradient's matrix (float32, default storage, CPU):
// grad and error of m * n elements (any shapes), p of rank * rows, q of
// rank * cols (compress::PowerSgdMatrix says which is which).
struct PowerSgdArrays {
  void* grad = nullptr;
  void* error = nullptr;
  void* p = nullptr;
  void* q = nullptr;
  int64_t m = 0, n = 0;
  int rank = 0;
};

// Pushes one engine op running `stage` on every matrix, in order, once the
// pending writes to what it reads are done. Reads and writes per stage:
// kAccumulate reads grad and q and writes error and p; kResidual reads p
// and writes error and q; kReconstruct reads p and q and writes grad.
// Throws Error(InvalidArgument) before pushing anything when an array does
// not qualify or two matrices share an array the stage writes.
void PushPowerSgdStage(compress::PowerSgdStage stage, const std::vector<PowerSgdArrays>& matrices, int priority);

}  // namespace mxnet_adapter
}  // namespace mxplugin
