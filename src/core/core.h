// The Core: one background thread that owns the world (MPI by default), a
// request queue fed by any thread, and per-process-set negotiation and
// execution. It sees its world and GPU backend only through interfaces
// (backend/world.h, core/gpu_backend.h); src/defaults.h picks the real ones.
//
// Note [Why one thread owns MPI]: MPI implementations are fastest (and many
// are only correct) when a single thread makes every call. Framework threads
// therefore only enqueue; the background thread negotiates, runs the
// collectives and calls the completion callbacks.
//
// Note [A core's life]: the background loop is in one state (Life), which
// only the loop changes and every thread reads, under mutex_:
//
//   kStarting --world up--> kRunning --loop ends--> kStopped
//       |                      |                       ^
//       | world failed         | LeaveWorld            | Shutdown
//       v                      v                       |
//   kStartFailed            kLeaving --pending failed--> kParked
//
// A core accepts ops in kRunning only; in every other state after the start
// an op fails at once with stop_status_, why the loop ended. The loop ends
// on three requests other threads make, which are not states:
// shutdown_requested_ (Shutdown, or RequestStop), failed_ (RequestStop: a
// failure on this rank, told to the others) and leave_requested_
// (LeaveWorld); and on a peer lost or a loop that throws. lost_peers_ says
// the world may be unusable (no MPI call, no collective shutdown).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/world.h"
#include "common/config.h"
#include "common/logging.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/gpu_backend.h"
#include "core/lost_peer_report.h"
#include "core/request.h"
#include "core/timeline.h"
#include "core/transfer_watchdog.h"

namespace mxplugin {

// One tensor of an Enqueue call, as the framework adapter describes it.
struct TensorOp {
  RequestMeta meta;  // name, op, reduce_op, dtype, device, shape, root (global rank), scales, splits, priority
  TensorRef input;
  TensorRef output;
  std::shared_ptr<SizedOutput> sized_output;  // Request::sized_output
};

class Core {
 public:
  // Starts the background thread, which builds this rank's world with
  // `make_world`, and waits for it to come up; throws Error on failure.
  // `gpu` runs GPU tensors (tests pass host stand-ins).
  Core(Config config, WorldFactory make_world, GpuBackend gpu);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  const Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }

  // Validates and queues the ops; `done` runs on the background thread when
  // all have finished (with the first error). Throws Error for bad arguments,
  // before anything is queued.
  // `pushed_at`: the ops' StampPush() when the framework pushed them to
  // run later (an engine op); 0 stamps them now.
  void Enqueue(int process_set_id, std::vector<TensorOp> ops, std::function<void(const Status&)> done,
               uint64_t pushed_at = 0);
  // Note [Diverged pushes] (core/diverged_pushes.cc): a stamp for
  // collectives pushed now, to be enqueued later; inside a push batch
  // opened on the calling thread (a trainer's step) every push gets the
  // batch's stamp. Any thread; a batch belongs to the thread that opened it
  // and ends at its matching EndPushBatch (batches nest; an unmatched End
  // does nothing).
  uint64_t StampPush();
  void BeginPushBatch();
  void EndPushBatch();
  // The argument checks of Enqueue alone (those that don't depend on what is
  // in flight), for adapters that enqueue later from another thread.
  void Check(int process_set_id, const std::vector<TensorOp>& ops) const;

  // Collective over all ranks; returns the new set's id.
  int AddProcessSet(std::vector<int> ranks);
  bool RemoveProcessSet(int id);
  std::vector<int> ProcessSetRanks(int id) const;
  // Rank within the set, or -1 when this process is not a member.
  int ProcessSetRank(int id) const;
  std::vector<int> ProcessSetIds() const;

  // Benchmark reference: one plain allreduce of the world's data plane (sum, in place) of `count`
  // elements at `data` over all ranks, run by the background thread with no
  // fusion or scaling; returns the seconds the MPI call itself took.
  // Collective: every rank calls it in the same order.
  double ReferenceAllreduce(void* data, int64_t count, DataType dtype);

  void StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline() { timeline_.Stop(); }

  // Stops the background thread (all ranks stop together). Idempotent.
  void Shutdown();
  // Note [Stuck transfers] (core/transfer_watchdog.h): why the data plane
  // is stuck with peers out of reach ("" while it is not), and the choice
  // to be told that rather than have the process ended. Any thread.
  std::string StuckTransfer() const;
  void KeepRunningWhenStuck();
  // Note [Lost peers as data] (core/lost_peer_report.h): from now on, a
  // line beginning with `marker` names the peers this rank has lost. Any thread.
  void SayLostPeers(std::string marker) { lost_peer_report_.SayWith(std::move(marker)); }
  // The code of the last request that failed on this rank (kOk while none
  // has), whether it failed running or was refused at Enqueue: what an
  // adapter whose framework kept only the message tells the caller by. An
  // adapter that catches Enqueue's Error notes it (NoteFailure). Any thread.
  StatusCode LastFailure() const { return last_failure_.load(); }
  void NoteFailure(StatusCode code) { last_failure_.store(code); }
  // Note [Leaving a broken world] (backend/leaving.h): from now on this
  // rank's planes make no call and the background thread parks; pending and
  // later ops fail. Returns whether the thread parked within `seconds` (not
  // while a call already inside MPI is blocked). For a process about to end.
  // Any thread.
  bool LeaveWorld(double seconds);
  // Asks every rank to stop after a failure on this rank (a GPU failure,
  // Note [GPU failures are fatal]), with `why` as this rank's reason for
  // failing later ops; peers abort their GPU work at once. Any thread; does
  // not wait.
  void RequestStop(const Status& why);

 private:
  struct ProcessSet {
    std::vector<int> ranks;  // global ranks
    Group group;  // both planes null on non-members
    std::unique_ptr<Controller> controller;
    std::unique_ptr<Executor> executor;
    PendingRequests pending;
    // Note [Diverged pushes]: ops pushed with a stamp up to this one fail
    // with `diverged_error` (this rank went on without a fence). Background
    // thread only.
    uint64_t diverged_through = 0;
    std::string diverged_error;
  };

  const ProcessSet& CheckLocked(int process_set_id, const std::vector<TensorOp>& ops) const;
  // GPU ops' device and pointer checks (CUDA queries): run without the lock.
  void CheckGpuArguments(const std::vector<TensorOp>& ops) const;
  void AgreeOnConfig();
  void Loop();
  void RunCycle(bool* stop);
  void Finish(Request& req, const Status& status);
  // Note [Diverged pushes]: a fence this rank went on without failed.
  void NoteFencesMissed(ProcessSet& set, const std::vector<Response>& responses);
  // Tells the loop (and, through the doorbell, the loops of this host's
  // other ranks) that there is work; any thread, without the lock.
  void WakeLoops();
  // Until the next cycle: the queue has work, it is time, or shutdown.
  void WaitForWork(std::unique_lock<std::mutex>& lock);
  // A failed collective's status, naming the peers this rank cannot reach.
  Status NameUnreachable(const Status& status);
  Status UnknownSet(int id) const;  // under mutex_
  void FailEverything(const Status& status);
  std::unique_ptr<ProcessSet> MakeProcessSet(std::vector<int> ranks, Group group);
  // Runs `action` on the background thread of every rank at one point of
  // the op order, once every rank asked for the same (Note [Control requests]).
  Status RunControl(ControlKind kind, std::vector<int64_t> args, std::function<Status()> action);

  Config config_;
  WorldFactory make_world_;
  GpuBackend gpu_;
  Logger logger_;
  Timeline timeline_;
  Topology topology_;

  std::thread thread_;
  std::unique_ptr<World> world_;               // background thread only
  ReachabilityProbe reach_;                    // from the world; set before the loop starts
  std::string host_;                           // this rank's host; set before the loop starts
  std::vector<int> world_ranks_;               // set before the loop starts
  std::mutex probe_mutex_;                     // guards the two below (any thread may fail a request)
  bool probed_ = false;
  PeerVerdict unreachable_;                    // what the first probe found
  LostPeerReport lost_peer_report_;            // outlives the watchdog, which says through it
  std::atomic<StatusCode> last_failure_{StatusCode::kOk};  // set by Finish, any thread
  // Times the data-plane phases; made before the loop starts, stopped when it ends.
  std::unique_ptr<TransferWatchdog> watchdog_;
  std::map<int, std::unique_ptr<ProcessSet>> sets_;  // structure guarded by mutex_
  int next_set_id_ = 1;                        // background thread only
  int control_counter_ = 0;                    // guarded by mutex_
  mutable int gpu_device_ = kCpuDevice;        // this rank's GPU, bound by its first GPU op; guarded by mutex_
  bool loop_device_set_ = false;               // background thread only: CUDA device made current there
  bool lost_peers_ = false;                    // negotiation timed out: MPI may be unusable; guarded by mutex_
  bool failed_ = false;                        // RequestStop was called; guarded by mutex_
  bool abort_gpu_work_ = false;                // background thread only: a rank stopped after a failure

  // The host's doorbell (Note [Doorbell]), null without one: owned from
  // before the loop starts until the core is destroyed, so that any thread
  // may ring it; read through doorbell_ring_, set once by the loop.
  std::shared_ptr<Doorbell> doorbell_;
  std::shared_ptr<Leaving> leaving_;           // from the world, null if it has none; set before the loop starts
  bool leave_requested_ = false;               // LeaveWorld was called; guarded by mutex_
  std::condition_variable parked_cv_;          // the loop stopped taking ops (Note [A core's life])
  std::atomic<Doorbell*> doorbell_ring_{nullptr};
  bool doorbell_reaches_all_ = false;          // background thread only: every rank is on this host
  Clock::time_point last_work_;                // background thread only: when a cycle last had work
  uint64_t cycles_ = 0;                        // background thread only: cycles begun (with a doorbell)

  // Note [Diverged pushes]: the last stamp given (any thread).
  std::atomic<uint64_t> pushes_{0};

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable started_;
  std::vector<Request> queue_;
  std::map<int, std::set<std::string>> in_flight_;  // names per process set
  // Ops waiting for an earlier op of the same name (Note [Reused names]).
  std::map<std::pair<int, std::string>, std::deque<Request>> deferred_;
  // Note [A core's life].
  enum class Life { kStarting, kStartFailed, kRunning, kLeaving, kParked, kStopped };
  Life life_ = Life::kStarting;
  // Whether ops fail at once, with stop_status_ (after the start). Under mutex_.
  bool Stopped() const { return life_ != Life::kStarting && life_ != Life::kRunning; }
  bool shutdown_requested_ = false;
  Status stop_status_;  // why ops fail after the loop ended
};

}  // namespace mxplugin
