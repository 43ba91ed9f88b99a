// What the GPU executor needs of a communicator beyond Communicator: the
// stream its data-plane calls are queued on, a pre-multiplied sum, and
// failure handling. NCCL implements it (backend/nccl/); the executor's host
// test (tests/native/) has a stand-in over MPI.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "backend/control_plane.h"

namespace mxplugin {

class GpuCommunicator : public Communicator {
 public:
  virtual void* stream() const = 0;
  // Whether ScaledSum can reduce `dtype` in one call.
  virtual bool ScaledSumSupported(DataType dtype) const = 0;
  // Sum with every element multiplied by `factor` first, the factor
  // converted to the element type (as NCCL takes it: for the half types a
  // rounded, possibly infinite or zero factor).
  virtual Status ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor) = 0;
  // Ok while healthy; the failure (a dead peer, ...) otherwise. Any thread.
  virtual Status AsyncError() = 0;
  // Makes any stuck call of this communicator return; later calls fail.
  // Any thread; idempotent.
  virtual void Abort() = 0;
};

// Builds one communicator per stream of `streams` over `bootstrap`'s members
// (the process set's control plane, which carries the set-up exchanges):
// collective over them, and every rank fails if one does (`local_error` makes
// this rank fail while still taking part). Set-up must finish by `deadline`;
// one call may then stay in progress for `call_timeout`.
using GpuCommunicatorFactory = std::function<Status(
    ControlPlane* bootstrap, int device, const std::vector<void*>& streams, const Status& local_error,
    Clock::time_point deadline, Clock::duration call_timeout, std::vector<std::unique_ptr<GpuCommunicator>>* out)>;

}  // namespace mxplugin
