#include "core/gpu_executor.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace mxplugin {
namespace gpu {
namespace {

// Work running longer than this makes the completion thread ask NCCL, at
// most every kHealthCheckEvery, whether a peer has failed.
constexpr std::chrono::milliseconds kHealthCheckAfter(500);
constexpr std::chrono::milliseconds kHealthCheckEvery(200);
// After aborting stuck work, how long its events get to complete before its
// requests fail anyway (their events are then leaked, not destroyed).
constexpr std::chrono::seconds kAbortGrace(10);
// How long draining waits for work in flight before aborting it.
constexpr std::chrono::seconds kDrainGrace(10);

}  // namespace

GpuExecutor::GpuExecutor(ControlPlane* bootstrap, const Config& config, Timeline* timeline, FinishFn finish,
                         std::function<void(const Status&)> fatal, DeviceRuntime* runtime,
                         GpuCommunicatorFactory make_comms)
    : bootstrap_(bootstrap), config_(config), timeline_(timeline), finish_(std::move(finish)),
      fatal_(std::move(fatal)), runtime_(runtime), make_comms_(std::move(make_comms)), logger_(config.log_level),
      global_rank_(bootstrap->global_ranks()[bootstrap->rank()]) {
  logger_.set_rank(global_rank_);
  completion_ = std::thread([this] { CompletionLoop(); });
  // Not its creator's (the core's) name; set here, before anyone can look.
  pthread_setname_np(completion_.native_handle(), "mxplugin-gpu");
}

GpuExecutor::~GpuExecutor() {
  Drain();
  if (device_ < 0) return;
  // After a failure, aborted kernels may never return: waiting for the lanes
  // (or a device-wide free) could hang, so their memory is left behind; so
  // is it when this thread cannot use the lanes' device.
  Status st = Broken();
  if (st.ok()) st = runtime_->UseDevice(device_);
  for (Lane& lane : lanes_) {
    if (st.ok()) st = runtime_->Synchronize(lane.stream);
    for (void* p : lane.retired) {
      if (st.ok()) st = runtime_->Free(p, lane.stream, false);
    }
    if (st.ok() && lane.fusion != nullptr) st = runtime_->Free(lane.fusion, lane.stream, false);
    if (st.ok()) st = runtime_->DestroyStream(lane.stream);
    lane.comm.reset();
  }
  if (!st.ok() && Broken().ok()) {
    MXP_LOG(logger_, kWarning, "releasing the GPU lanes on gpu(" << device_ << ") failed, the rest of their memory "
                                   "is left to the process's exit: " << st.reason());
  }
}

void GpuExecutor::BeginDrain(bool abort) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    abort_on_drain_ = abort_on_drain_ || abort;
  }
  wake_.notify_all();
}

void GpuExecutor::Drain() {
  BeginDrain();
  if (completion_.joinable()) completion_.join();
}

Status GpuExecutor::Broken() {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

void GpuExecutor::Fail(const Status& why) {
  std::vector<GpuCommunicator*> comms;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.ok()) return;
    // Aborted whatever the cause: later ops fail because of it, not because
    // their own arguments were wrong.
    broken_ = Status::Aborted("GPU collectives failed and were aborted on this rank: " + why.reason());
    for (Lane& lane : lanes_) comms.push_back(lane.comm.get());
  }
  for (GpuCommunicator* comm : comms) comm->Abort();
  fatal_(Broken());
}

Status GpuExecutor::EnsureLanes(int device) {
  if (!lanes_.empty()) {
    if (device == device_) return Status::Ok();
    return Status::InvalidArgument("this rank's GPU collectives run on gpu(" + std::to_string(device_) +
                                   "); a tensor on gpu(" + std::to_string(device) +
                                   ") cannot join them (one GPU per process)");
  }
  Status local = runtime_->UseDevice(device);
  const bool stream_ordered = local.ok() && runtime_->StreamOrderedAllocation(device);
  std::vector<void*> streams;
  for (int i = 0; i < std::max(1, config_.num_streams) && local.ok(); ++i) {
    void* s = nullptr;
    local = runtime_->CreateStream(&s);
    if (local.ok()) streams.push_back(s);
  }
  // Collective: a rank whose own set-up failed still takes part, so that
  // every rank of the set gets an error rather than a wait. A single NCCL
  // call may stay in progress for half the peer timeout: the background
  // thread then still reaches the next negotiation round in time to stop
  // with its peers instead of being declared dead by them.
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config_.peer_timeout_seconds));
  std::vector<std::unique_ptr<GpuCommunicator>> comms;
  Status st = make_comms_(bootstrap_, device, streams, local, Clock::now() + timeout, timeout / 2, &comms);
  if (!st.ok()) {
    std::string also;
    for (void* s : streams) {
      Status destroyed = runtime_->DestroyStream(s);
      if (!destroyed.ok() && also.empty()) also = " (and destroying its streams failed: " + destroyed.reason() + ")";
    }
    return Status(st.code(), "setting up NCCL on gpu(" + std::to_string(device) + ") failed: " + st.reason() + also);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  lanes_.resize(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    lanes_[i].stream = streams[i];
    lanes_[i].comm = std::move(comms[i]);
  }
  device_ = device;
  stream_ordered_alloc_ = stream_ordered;
  return Status::Ok();
}

GpuExecutor::Lane* GpuExecutor::NextLane() {
  Lane* lane = &lanes_[next_lane_ % lanes_.size()];
  ++next_lane_;
  return lane;
}

void GpuExecutor::Launch(std::vector<Request>&& requests, int device, const char* phase, const LaunchFn& launch) {
  const auto begin = Clock::now();
  Status st = Broken();
  if (!st.ok()) {
    Submit(nullptr, std::move(requests), st, phase, begin);
    return;
  }
  st = EnsureLanes(device);
  if (!st.ok()) {
    // Fatal either way: a failed set-up failed on the peers too; a wrong
    // device (Core::Check refuses one at enqueue; a backstop) leaves the
    // peers in a collective on the next lane that this rank never joins,
    // and every later op on the lanes paired with the wrong one.
    st = Status(st.code(), "'" + requests[0].meta.name + "' on rank " + std::to_string(global_rank_) + ": " +
                               st.reason());
    Fail(st);
    Submit(nullptr, std::move(requests), st, phase, begin);
    return;
  }
  Lane* lane = NextLane();
  st = launch(*lane, requests, &phase);
  if (!st.ok()) Fail(st);  // Note [GPU failures are fatal]
  Submit(lane, std::move(requests), st, phase, begin);
}

void GpuExecutor::RunFused(std::vector<Request> group) {
  const int device = group[0].input.device;
  Launch(std::move(group), device, "NCCL_ALLREDUCE",
         [this](Lane& lane, std::vector<Request>& requests, const char**) { return LaunchFused(lane, requests); });
}

void GpuExecutor::RunOne(Request req, const Response& resp) {
  const int device = req.input.device;
  std::vector<Request> one;
  one.push_back(std::move(req));
  Launch(std::move(one), device, "NCCL", [this, &resp](Lane& lane, std::vector<Request>& requests, const char** phase) {
    return LaunchOne(lane, requests[0], resp, phase);
  });
}

void GpuExecutor::Submit(Lane* lane, std::vector<Request> requests, Status status, const char* phase,
                         Clock::time_point begin) {
  InFlight item;
  item.lane = lane;
  item.requests = std::move(requests);
  item.status = status;
  item.phase = phase;
  item.begin = begin;
  if (lane != nullptr) {
    // Even after a failed launch, completion waits for whatever was queued,
    // so that no kernel still writes an output its owner has been told about.
    void* done = nullptr;
    Status st = runtime_->RecordEvent(lane->stream, &done);
    if (st.ok()) {
      item.done = done;
    } else {
      if (item.status.ok()) item.status = st;
      Fail(st);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.push_back(std::move(item));
  }
  wake_.notify_all();
}

void GpuExecutor::FinishItem(InFlight& item, const Status& status) {
  const auto end = Clock::now();
  for (Request& r : item.requests) {
    if (timeline_->active()) timeline_->Record(r.meta.name, item.phase, item.begin, end);
    try {
      finish_(r, status);
    } catch (const std::exception&) {
      // A completion callback that throws must not take this thread, and
      // every later request, with it; the request itself is finished.
    }
  }
  if (item.done != nullptr) {
    Status st = runtime_->DestroyEvent(item.done);
    if (!st.ok()) Fail(st);  // the device is in trouble: later work cannot be trusted
  }
  item.done = nullptr;
}

// Polls the events of launched work and finishes requests as their work
// completes, backing off while nothing does. Work running long gets a health
// check (a dead peer aborts every lane); work older than the peer timeout,
// or still running that long after draining began, is aborted; aborted work
// whose events still do not complete fails after a grace period.
void GpuExecutor::CompletionLoop() {
  const auto peer_timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config_.peer_timeout_seconds));
  // Collectives in flight at a clean stop finish within milliseconds.
  const Clock::duration drain_grace = std::min<Clock::duration>(peer_timeout, kDrainGrace);
  bool device_set = false;
  Clock::time_point drain_started{}, aborted_at{}, last_health_check{};
  auto idle = std::chrono::microseconds(10);
  while (true) {
    std::deque<InFlight> items;
    bool draining, abort_now;
    int device;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return !in_flight_.empty() || draining_; });
      items.swap(in_flight_);
      draining = draining_;
      abort_now = abort_on_drain_;
      device = device_;
    }
    const auto now = Clock::now();
    if (draining && drain_started == Clock::time_point{}) drain_started = now;
    if (items.empty()) {
      if (draining) return;
      continue;
    }
    if (!device_set && device >= 0) {
      // Events and buffers freed here belong to this rank's GPU.
      Status st = runtime_->UseDevice(device);
      if (!st.ok()) Fail(Status(st.code(), "the GPU completion thread cannot use gpu(" + std::to_string(device) +
                                               "): " + st.reason()));
      device_set = true;
    }
    const bool health_due = now - last_health_check > kHealthCheckEvery;
    bool progressed = false;
    std::deque<InFlight> still;
    for (InFlight& item : items) {
      Status failure;
      const EventState state = item.done == nullptr ? EventState::kDone : runtime_->QueryEvent(item.done, &failure);
      if (state == EventState::kPending) {
        Status broken = Broken();
        if (broken.ok()) {
          if (health_due && now - item.begin > kHealthCheckAfter && item.lane != nullptr) {
            last_health_check = now;
            Status health = item.lane->comm->AsyncError();
            if (!health.ok()) Fail(health);
          }
          if (now - item.begin > peer_timeout) {
            Fail(Status::Aborted("a GPU collective ran for more than " +
                                 std::to_string(static_cast<int>(config_.peer_timeout_seconds)) +
                                 " s (MXPLUGIN_PEER_TIMEOUT_SECONDS); a peer has probably died"));
          } else if (draining && abort_now) {
            Fail(Status::Aborted("another rank stopped after a failure; GPU collectives waiting for it were "
                                 "aborted (see that rank's error)"));
          } else if (draining && now - drain_started > drain_grace) {
            // Every rank has stopped: work still running now waits for a
            // peer that has given up (e.g. after its own GPU failure).
            Fail(Status::Aborted("GPU collectives were still running " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(drain_grace).count()) +
                                 " s after mxplugin stopped; they were aborted"));
          }
        } else {
          if (aborted_at == Clock::time_point{}) aborted_at = now;
          if (now - aborted_at > kAbortGrace) {
            item.done = nullptr;  // leaked: the GPU may never signal it
            FinishItem(item, broken);
            progressed = true;
            continue;
          }
        }
        still.push_back(std::move(item));
        continue;
      }
      progressed = true;
      Status status = item.status;
      if (status.ok() && state == EventState::kFailed) {
        status = failure;
        Fail(status);  // the lane's later work cannot be trusted either
      }
      Status broken = Broken();
      if (status.ok() && !broken.ok()) status = broken;  // aborted NCCL work leaves garbage behind
      FinishItem(item, status);
    }
    if (!still.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = still.rbegin(); it != still.rend(); ++it) in_flight_.push_front(std::move(*it));
    }
    if (progressed) {
      idle = std::chrono::microseconds(10);
    } else {
      std::this_thread::sleep_for(idle);
      idle = std::min(idle * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace gpu
}  // namespace mxplugin
