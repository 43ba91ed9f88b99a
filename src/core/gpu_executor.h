// Runs the GPU requests of one process set over NCCL, without blocking the
// background thread on the GPU.
//
// Note [GPU lanes]: MXPLUGIN_NUM_STREAMS lanes, each a CUDA stream with its
// own NCCL communicator and device fusion buffer. Work goes to the lanes
// round-robin, in negotiated order, so every rank puts the same op on the
// same lane and independent fused buffers reduce concurrently (NCCL runs
// operations of one communicator one after another; separate communicators
// may overlap, which NCCL supports while their kernels fit on the GPU at
// once -- the usual case for a handful of lanes; MXPLUGIN_NUM_STREAMS=1
// avoids it entirely). A lane first waits on each request's ready event (the
// producer's work on the framework stream), then packs, reduces and unpacks;
// an event recorded after that tells the completion thread when to finish
// the requests. No device-wide synchronisation anywhere.
//
// Note [GPU failures are fatal]: once a lane has been picked, every rank must
// issue the same NCCL call on it, or the lanes pair the wrong operations. So
// any failure from there on (a launch error, NCCL setup, a call stuck in
// progress, work outliving the peer timeout, a dead peer) aborts every lane
// and asks the Core to stop, which stops all ranks through negotiation; their
// stuck work is then aborted while draining. The requests fail with the cause.
//
// Compiled in every build; it runs over the Core's GpuBackend (CudaRuntime
// and NCCL communicators in NCCL builds, host stand-ins in tests/native/).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/communicator.h"
#include "backend/gpu_communicator.h"
#include "common/config.h"
#include "common/logging.h"
#include "core/device_runtime.h"
#include "core/request.h"
#include "core/timeline.h"

namespace mxplugin {
namespace gpu {

class GpuExecutor {
 public:
  using FinishFn = std::function<void(Request&, const Status&)>;
  // `bootstrap`: the process set's control plane (rank, size, and the
  // exchanges that set the lanes up), used on the background thread only.
  // `finish` runs on the completion thread and must not stop the Core.
  // `fatal` asks the Core to stop (Note [GPU failures are fatal]).
  // `runtime` (outliving this) makes the device calls; `make_comms` builds
  // the lanes' communicators.
  GpuExecutor(ControlPlane* bootstrap, const Config& config, Timeline* timeline, FinishFn finish,
              std::function<void(const Status&)> fatal, DeviceRuntime* runtime, GpuCommunicatorFactory make_comms);
  // Drain()s, then frees the lanes.
  ~GpuExecutor();

  // Both take the requests and finish each exactly once, later, from the
  // completion thread.
  void RunFused(std::vector<Request> group);
  void RunOne(Request req, const Response& resp);

  // Asks the completion thread to finish what is in flight and stop; work
  // still running after the drain grace (or at once, with `abort`: a peer
  // stopped after a failure and will not take part) is aborted and fails.
  void BeginDrain(bool abort = false);
  // BeginDrain(), then waits for the completion thread. Idempotent.
  void Drain();

 private:
  struct Lane {
    void* stream = nullptr;
    std::unique_ptr<GpuCommunicator> comm;
    void* fusion = nullptr;  // device memory
    int64_t fusion_bytes = 0;
    std::vector<void*> retired;  // outgrown buffers, without stream-ordered allocation
  };
  struct InFlight {
    void* done = nullptr;  // event recorded after the lane's work; null: nothing to wait for
    Lane* lane = nullptr;
    std::vector<Request> requests;
    Status status;
    const char* phase = "";
    Clock::time_point begin;
  };

  Status EnsureLanes(int device);
  Lane* NextLane();
  // Makes the lane wait for the request's producer (its ready event).
  Status WaitReady(Lane& lane, const Request& request);
  Status Reserve(Lane& lane, int64_t bytes, void** out);
  Status LaunchFused(Lane& lane, std::vector<Request>& group);
  Status LaunchOne(Lane& lane, Request& req, const Response& resp, const char** phase);
  Status LaunchAllreduce(Lane& lane, Request& req);
  // Whether a direct allreduce is one pre-multiplied sum (Note [Pre-multiplied sums]).
  bool PreMultiplies(const Lane& lane, const Request& req) const;
  Status LaunchReducescatter(Lane& lane, Request& req);
  // Copy-and-scale of one buffer on the lane (nothing when in place with factor 1).
  Status Scale(Lane& lane, void* dst, const void* src, int64_t count, DataType dtype, double factor);
  // Picks a lane and launches; a failure after the pick is fatal. `launch`
  // may set the timeline phase.
  using LaunchFn = std::function<Status(Lane&, std::vector<Request>&, const char**)>;
  void Launch(std::vector<Request>&& requests, int device, const char* phase, const LaunchFn& launch);
  // Hands the requests to the completion thread, behind an event on the lane.
  void Submit(Lane* lane, std::vector<Request> requests, Status status, const char* phase, Clock::time_point begin);
  void CompletionLoop();
  void FinishItem(InFlight& item, const Status& status);
  // Aborts every lane and asks the Core to stop; the first cause sticks.
  void Fail(const Status& why);
  Status Broken();

  ControlPlane* bootstrap_;
  const Config& config_;
  Timeline* timeline_;
  FinishFn finish_;
  std::function<void(const Status&)> fatal_;
  DeviceRuntime* runtime_;
  GpuCommunicatorFactory make_comms_;
  Logger logger_;
  const int global_rank_;  // for messages
  int device_ = -1;  // written under mutex_ once, by EnsureLanes
  bool stream_ordered_alloc_ = true;  // cudaMallocAsync works on device_
  std::vector<Lane> lanes_;  // made once by the background thread; Fail() may abort their comms from any thread
  size_t next_lane_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<InFlight> in_flight_;
  Status broken_;  // set once by Fail(): later GPU ops fail at once
  bool draining_ = false;
  bool abort_on_drain_ = false;
  std::thread completion_;
};

}  // namespace gpu
}  // namespace mxplugin
