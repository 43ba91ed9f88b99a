// Runs negotiated responses for one process set on this rank's requests:
// fuses small allreduces into the fusion buffer (prescale fused into the copy
// in, postscale into the copy out), reduces large ones where they lie (every
// CPU one, when the data plane batches small buffers itself), and runs the
// other collectives.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/communicator.h"
#include "backend/control_plane.h"
#include "common/config.h"
#include "common/logging.h"
#include "core/fusion_buffer.h"
#include "core/request.h"
#include "core/timeline.h"

#include "core/gpu_backend.h"
#include "core/gpu_executor.h"

namespace mxplugin {

using PendingRequests = std::unordered_map<std::string, Request>;
// Called once per request when it is done (and removed from the pending map).
using FinishFn = std::function<void(Request&, const Status&)>;

class Executor {
 public:
  // `stop` asks the Core to stop all ranks (a GPU failure, Note [GPU
  // failures are fatal]); it may be called from the GPU completion thread.
  // `gpu` (outliving this) runs GPU tensors.
  // `comm` moves the data; `control` runs barriers and bootstraps GPU lanes.
  Executor(Communicator* comm, ControlPlane* control, const Config& config, Timeline* timeline, FinishFn finish,
           std::function<void(const Status&)> stop, const GpuBackend* gpu)
      : comm_(comm), control_(control), config_(config), timeline_(timeline), finish_(std::move(finish)), stop_(std::move(stop)),
        gpu_backend_(gpu) {}

  // Runs the responses' requests: CPU ones before returning, GPU ones (moved
  // out of `pending`) asynchronously on the GPU executor.
  void Execute(const std::vector<Response>& responses, PendingRequests* pending);
  // Asks asynchronous (GPU) work to finish (BeginDrain), and waits for it
  // (Drain); call without Core's lock.
  // `abort`: in-flight GPU work cannot finish (a peer failed): abort it now.
  void BeginDrain(bool abort);
  void Drain();

 private:
  // One data-plane call's worth of requests (or one other collective).
  struct Unit {
    enum class Kind {
      kFused,  // small allreduces of one key, packed into the fusion buffer in this order
      kBatch,  // allreduces of one dtype and op, reduced where they lie in one AllreduceMany
      kOne,    // any other request, run alone
    };
    Kind kind = Kind::kOne;
    std::vector<Request*> requests;
    const Response* response = nullptr;  // kOne's
    int64_t bytes = 0;                   // kFused/kBatch: the fusion-aligned total so far
  };
  // The units of one round, in the order they run: each where its first
  // (highest-priority) request stands (Note [Fusion across priorities]).
  struct Plan {
    std::vector<Unit> units;
  };
  // Note [Joined ranks] (core/message_table.cc): this joined rank's part in
  // a request it never made, with buffers that live in `stand_in`.
  struct StandIn {
    Request request;
    std::vector<char> input, output;
  };
  void MakeStandIn(const Response& resp, StandIn* stand_in) const;
  // `items` in priority order; `batch_direct`: direct allreduces become
  // kBatch units (CPU), else kOne (GPU).
  Plan MakePlan(const std::vector<std::pair<Request*, const Response*>>& items, bool batch_direct) const;
  void ExecuteCpu(Plan& plan);
  void ExecuteGpu(const Plan& plan);
  void RunFused(std::vector<Request*>& group);
  Status RunOne(Request& req, const Response& resp);
  Status RunAllreduce(const std::vector<Request*>& batch);
  Status RunAllgather(Request& req, const Response& resp);
  Status RunBroadcast(Request& req);
  Status RunAlltoall(Request& req, const Response& resp);
  Status RunReducescatter(Request& req);
  void Trace(const Request& req, const char* phase, Clock::time_point begin, Clock::time_point end);
  bool Fusable(const Request& req) const;

  Communicator* comm_;
  ControlPlane* control_;
  const Config& config_;
  Timeline* timeline_;
  FinishFn finish_;
  std::function<void(const Status&)> stop_;
  FusionBuffer buffer_;
  const GpuBackend* gpu_backend_;
  std::unique_ptr<gpu::GpuExecutor> gpu_;  // made at the first GPU response
};

}  // namespace mxplugin
