// Runs the GPU requests of one process set over NCCL, without blocking the
// background thread on the GPU.
//
// Note [GPU lanes]: MXPLUGIN_NUM_STREAMS lanes, each a CUDA stream with its
// own NCCL communicator and device fusion buffer. Work goes to the lanes
// round-robin, in negotiated order, so every rank puts the same op on the
// same lane and independent fused buffers reduce concurrently (NCCL runs
// operations of one communicator one after another; separate communicators
// may overlap). A lane first waits on each request's ready event (the
// producer's work on the framework stream), then packs, reduces and unpacks;
// an event recorded after that tells the completion thread when to finish
// the requests. No device-wide synchronisation anywhere.
//
// Defined only in builds with MXPLUGIN_WITH_NCCL.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/communicator.h"
#include "backend/nccl/nccl_communicator.h"
#include "common/config.h"
#include "core/request.h"
#include "core/timeline.h"

namespace mxplugin {
namespace gpu {

class GpuExecutor {
 public:
  using FinishFn = std::function<void(Request&, const Status&)>;
  // `bootstrap`: the process set's MPI communicator (rank, size, and the
  // broadcast of NCCL ids), used on the background thread only.
  GpuExecutor(Communicator* bootstrap, const Config& config, Timeline* timeline, FinishFn finish);
  // Drain()s, then frees the lanes.
  ~GpuExecutor();

  // Both take the requests and finish each exactly once, later, from the
  // completion thread (or now, when nothing could be launched).
  void RunFused(std::vector<Request> group);
  void RunOne(Request req, const Response& resp);

  // Waits until every launched request has finished. Work still running
  // after the peer timeout is aborted and its requests fail. Idempotent.
  void Drain();

 private:
  struct Lane {
    void* stream = nullptr;  // cudaStream_t
    std::unique_ptr<NcclCommunicator> comm;
    void* fusion = nullptr;  // device memory, grown on the lane's stream
    int64_t fusion_bytes = 0;
  };
  struct InFlight {
    void* done = nullptr;  // cudaEvent_t recorded after the lane's work
    Lane* lane = nullptr;
    std::vector<Request> requests;
    Status status;
    const char* phase = "";
    Clock::time_point begin;
  };

  Status EnsureLanes(int device);
  Lane& NextLane();
  // Makes the lane wait for the request's producer (its ready event).
  Status WaitReady(Lane& lane, const Request& request);
  Status Reserve(Lane& lane, int64_t bytes, void** out);
  Status LaunchFused(Lane& lane, std::vector<Request>& group);
  Status LaunchOne(Lane& lane, Request& req, const Response& resp, const char** phase);
  Status LaunchAllreduce(Lane& lane, Request& req);
  Status LaunchReducescatter(Lane& lane, Request& req);
  // Hands the requests to the completion thread behind an event on the lane
  // (or finishes them at once when even that fails).
  void Submit(Lane* lane, std::vector<Request> requests, Status status, const char* phase, Clock::time_point begin);
  void CompletionLoop();
  void FinishItem(InFlight& item, const Status& status);
  void AbortAll(const Status& why);
  Status Broken();

  Communicator* bootstrap_;
  const Config& config_;
  Timeline* timeline_;
  FinishFn finish_;
  int device_ = -1;
  std::vector<Lane> lanes_;  // background thread only, except Abort() of their comms
  size_t next_lane_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<InFlight> in_flight_;
  Status broken_;  // set once NCCL failed: later GPU ops fail at once
  bool draining_ = false;
  std::thread completion_;
};

}  // namespace gpu
}  // namespace mxplugin
