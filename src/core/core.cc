#include "core/core.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <limits>
#include <sstream>

#include "core/ranks_text.h"

namespace mxplugin {
namespace {

// Why ops fail once this rank has left its world (Note [Leaving a broken world]).
constexpr char kLeftWorld[] = "this rank has left its world (mxplugin.elastic)";

}  // namespace

Core::Core(Config config, WorldFactory make_world, GpuBackend gpu)
    : config_(std::move(config)), make_world_(std::move(make_world)), gpu_(std::move(gpu)),
      logger_(config_.log_level) {
  if (!make_world_) throw Error(Status::InvalidArgument("the Core needs a world factory"));
  if (gpu_.runtime && !gpu_.make_comms) {
    throw Error(Status::InvalidArgument("a GPU backend needs a communicator factory"));
  }
  if (!gpu_.runtime && gpu_.missing.empty()) gpu_.missing = "this mxplugin has no GPU backend";
  thread_ = std::thread([this] { Loop(); });
  std::unique_lock<std::mutex> lock(mutex_);
  started_.wait(lock, [this] { return life_ != Life::kStarting; });
  // Only a failed start throws: a world that came up and stopped at once
  // (a peer that finished and shut down before this thread woke) is a core
  // whose later calls fail, as any stopped core's do.
  if (life_ == Life::kStartFailed) {
    lock.unlock();
    thread_.join();
    throw Error(stop_status_);
  }
}

Core::~Core() { Shutdown(); }

void Core::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_requested_ = true;
  }
  WakeLoops();
  if (thread_.joinable()) thread_.join();
  timeline_.Stop();
}

void Core::RequestStop(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_status_.ok()) stop_status_ = why;
    shutdown_requested_ = true;
    failed_ = true;
  }
  WakeLoops();
}

std::unique_ptr<Core::ProcessSet> Core::MakeProcessSet(std::vector<int> ranks, Group group) {
  auto set = std::make_unique<ProcessSet>();
  set->ranks = std::move(ranks);
  set->group = std::move(group);
  if (set->group.data) {
    MXP_LOG(logger_, kDebug, "process set of ranks " << RanksText(set->ranks) << ": " << set->group.how);
    // Note [A verdict within the timeout]: with a probe, negotiation gives
    // up early by the probe's time.
    const double lead = reach_ ? VerdictLead(config_.peer_timeout_seconds) : 0.0;
    set->controller = std::make_unique<Controller>(set->group.control.get(), config_, &logger_,
                                                   config_.peer_timeout_seconds - lead);
    set->executor = std::make_unique<Executor>(
        set->group.data.get(), set->group.control.get(), config_, &timeline_,
        [this](Request& r, const Status& s) { Finish(r, s.ok() ? s : NameUnreachable(s)); },
        [this](const Status& why) { RequestStop(why); }, &gpu_);
  }
  return set;
}

void Core::Loop() {
  try {
    world_ = make_world_(config_);
    // Named so that it can be told apart in a stack dump, `top -H` and tests
    // (15 characters at most); only now, since the threads that MPI starts
    // from here in its start take their creator's name.
    pthread_setname_np(pthread_self(), "mxplugin-core");
    AgreeOnConfig();
    const std::vector<int> everyone = world_->control().global_ranks();
    Group group;
    ThrowIfError(world_->CreateGroup(everyone, &group));
    reach_ = world_->reachability();
    host_ = world_->host();
    world_ranks_ = everyone;
    doorbell_ = world_->doorbell();
    doorbell_reaches_all_ = doorbell_ && world_->topology().local_size == world_->topology().size;
    doorbell_ring_.store(doorbell_.get());
    std::lock_guard<std::mutex> lock(mutex_);
    leaving_ = world_->leaving();
    topology_ = world_->topology();
    logger_.set_rank(topology_.rank);
    watchdog_ = std::make_unique<TransferWatchdog>(config_.peer_timeout_seconds, reach_, host_, topology_.rank,
                                                   everyone, &logger_, &lost_peer_report_);
    sets_[0] = MakeProcessSet(everyone, std::move(group));
    life_ = Life::kRunning;
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_status_ = Status(e.status().code(), "mxplugin initialisation failed: " + e.status().reason());
    life_ = Life::kStartFailed;
    started_.notify_all();
    return;
  }
  started_.notify_all();
  if (!config_.timeline_path.empty() &&
      !timeline_.Start(config_.timeline_path, topology_.rank, config_.timeline_mark_cycles)) {
    MXP_LOG(logger_, kError, "cannot open timeline file '" << config_.timeline_path << "' (MXPLUGIN_TIMELINE)");
  }
  MXP_LOG(logger_, kDebug, "background loop started, " << topology_.size << " ranks");

  bool stop = false;
  Status failure;
  try {
    while (!stop) RunCycle(&stop);
  } catch (const Error& e) {
    failure = e.status();
  } catch (const std::exception& e) {
    failure = Status::Internal(std::string("mxplugin background loop failed: ") + e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_status_.ok()) {
      stop_status_ = failure.ok() ? Status::Aborted(
                                        "mxplugin has been shut down (shutdown() was called on some rank, or a "
                                        "rank stopped after a failure: see the other ranks' output)")
                                  : failure;
    }
    life_ = Life::kStopped;
  }
  FailEverything(stop_status_);
  // The world is marked broken (no MPI call as it ends, no MPI_Finalize at
  // the process's exit) only when it may be unusable (a lost peer, an
  // exception from the loop); a stop asked for by shutdown() or a GPU failure
  // leaves it healthy on every rank, so all ranks finalise.
  const bool broken = lost_peers_ || !failure.ok();
  // GPU work finishes its requests from another thread, through Finish(),
  // which takes the lock: wait for it, and destroy the sets, without it.
  for (auto& kv : sets_) {
    if (kv.second->executor) kv.second->executor->BeginDrain(abort_gpu_work_ || lost_peers_);
  }
  for (auto& kv : sets_) {
    if (kv.second->executor) kv.second->executor->Drain();
  }
  std::map<int, std::unique_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sets.swap(sets_);
  }
  sets.clear();
  watchdog_->Stop();
  if (broken) world_->MarkBroken();
  world_.reset();
}

// Settings that must be equal on every rank (fusion decides message sizes;
// the response cache's capacity decides its bit indices; the stream count
// decides which NCCL communicator carries an op) come from rank 0,
// whatever each rank's environment says.
void Core::AgreeOnConfig() {
  int64_t values[5] = {config_.fusion_threshold_bytes, config_.direct_threshold_bytes, config_.cache_capacity,
                       config_.num_streams, config_.gpu_direct_threshold_bytes};
  std::string bytes(reinterpret_cast<const char*>(values), sizeof(values));
  auto deadline = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(config_.peer_timeout_seconds * 1e6));
  ThrowIfError(world_->control().BroadcastBytes(&bytes, deadline));
  if (bytes.size() != sizeof(values)) throw Error(Status::Internal("bad configuration broadcast"));
  std::memcpy(values, bytes.data(), sizeof(values));
  config_.fusion_threshold_bytes = values[0];
  config_.direct_threshold_bytes = values[1];
  config_.cache_capacity = static_cast<int>(values[2]);
  config_.num_streams = static_cast<int>(values[3]);
  config_.gpu_direct_threshold_bytes = values[4];
}

void Core::RunCycle(bool* stop) {
  std::vector<Request> incoming;
  bool want_shutdown, i_failed;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    WaitForWork(lock);
    if (leave_requested_) {
      // Note [Leaving a broken world]: no MPI call from here on, nor MPI's
      // collective shutdown; what is pending fails now, what comes later
      // at once (Note [A core's life]).
      lost_peers_ = true;
      life_ = Life::kLeaving;
      if (stop_status_.ok()) stop_status_ = Status::Aborted(kLeftWorld);
      const Status left = stop_status_;
      lock.unlock();
      FailEverything(left);
      lock.lock();
      life_ = Life::kParked;
      parked_cv_.notify_all();
      wake_.wait(lock, [this] { return shutdown_requested_; });
      *stop = true;
      return;
    }
    incoming.swap(queue_);
    want_shutdown = shutdown_requested_;
    i_failed = failed_;
  }
  const auto now = Clock::now();
  if (!incoming.empty()) last_work_ = now;
  timeline_.MarkCycle(now);
  for (auto& req : incoming) {
    // Device calls on this thread (events freed, NCCL set-up) use this rank's GPU.
    if (!loop_device_set_ && req.meta.device != kCpuDevice && gpu_.runtime) {
      loop_device_set_ = gpu_.runtime->UseDevice(req.meta.device).ok();
    }
    auto it = sets_.find(req.process_set_id);
    if (it == sets_.end() || !it->second->group.data) {
      Finish(req, Status::InvalidArgument("process set " + std::to_string(req.process_set_id) +
                                          " was removed before '" + req.meta.name + "' ran"));
      continue;
    }
    if (req.pushed_at != 0 && req.pushed_at <= it->second->diverged_through) {
      Finish(req, Status::Mismatch(it->second->diverged_error));  // Note [Diverged pushes]
      continue;
    }
    it->second->controller->Submit(req.meta, now);
    std::string name = req.meta.name;
    it->second->pending.emplace(std::move(name), std::move(req));
  }

  std::vector<int> ids;
  for (const auto& kv : sets_) ids.push_back(kv.first);
  for (int id : ids) {
    auto it = sets_.find(id);
    if (it == sets_.end() || !it->second->group.data) continue;
    ProcessSet& set = *it->second;
    std::vector<Response> responses;
    bool shutdown = false;
    bool failed = false;
    Status st = set.controller->RunRound(id == 0 && want_shutdown, id == 0 && i_failed, &responses, &shutdown, &failed);
    if (!st.ok()) {
      {
        // Note [Leaving a broken world]: the round stopped at the flag, so no
        // peer was lost, and none is probed; the loop ends, failing what is
        // pending with the same words as when the flag is seen between rounds,
        // not as a lost peer's.
        std::lock_guard<std::mutex> lock(mutex_);
        if (leave_requested_) {
          lost_peers_ = true;
          if (stop_status_.ok()) stop_status_ = Status::Aborted(kLeftWorld);
          *stop = true;
          return;
        }
      }
      // Note [Who is unreachable]: a host cut off is named; else a process
      // has died or is stuck.
      const double lead = VerdictLead(config_.peer_timeout_seconds);
      const PeerVerdict who = reach_ ? reach_(set.ranks, lead) : PeerVerdict{};
      const std::string cut_off = CutOffText(who, host_, lead);
      lost_peer_report_.Say(topology_.rank, host_, who);  // Note [Lost peers as data]
      std::lock_guard<std::mutex> lock(mutex_);
      lost_peers_ = true;
      // A cause found earlier (a GPU failure on this rank) is the better message.
      if (stop_status_.ok()) stop_status_ = LostContact(
          cut_off + st.reason() + " while negotiating on process set " +
          std::to_string(id) + " (ranks " + RanksText(set.ranks) + ") within the peer timeout, " +
          std::to_string(static_cast<int>(config_.peer_timeout_seconds)) + " s (MXPLUGIN_PEER_TIMEOUT_SECONDS). " +
          (!who.unreachable.empty() ? "That host is probably cut off from the network."
           : who.ended.empty()      ? "A process has probably died or is stuck outside mxplugin; see the other "
                                      "ranks' output."
                                    : "See that rank's output for why it ended."));
      *stop = true;
      return;
    }
    if (shutdown) {
      // A rank stopped after a failure: GPU work still waiting for it will
      // never finish, so it is aborted at once rather than after the drain grace.
      abort_gpu_work_ = failed;
      if (failed) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_status_.ok()) {
          stop_status_ = Status::Aborted(
              "mxplugin stopped because another rank failed (its GPU collectives; see that rank's error)");
        }
      }
      *stop = true;
      return;
    }
    if (!responses.empty()) watchdog_->Begin();  // Note [Stuck transfers]
    NoteFencesMissed(set, responses);
    set.executor->Execute(responses, &set.pending);
    watchdog_->End();
    if (!responses.empty()) last_work_ = Clock::now();
  }
}

void Core::Enqueue(int process_set_id, std::vector<TensorOp> ops, std::function<void(const Status&)> done,
                   uint64_t pushed_at) {
  if (ops.empty()) {
    done(Status::Ok());
    return;
  }
  if (pushed_at == 0) pushed_at = StampPush();
  auto completion = std::make_shared<Completion>(ops.size(), std::move(done));
  const auto now = Clock::now();
  // GPU inputs: mark the producer's work queued so far, on this (the
  // framework's) thread and before anything is queued, so a CUDA failure
  // leaves nothing half-enqueued.
  std::vector<std::shared_ptr<void>> ready(ops.size());
  bool any_gpu = false;
  for (const auto& op : ops) any_gpu = any_gpu || op.meta.device != kCpuDevice;
  if (any_gpu && gpu_.runtime) {
    CheckGpuArguments(ops);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].meta.device == kCpuDevice) continue;
      ThrowIfError(gpu_.runtime->RecordReadyEvent(ops[i].meta.device, ops[i].input.stream, &ready[i]));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const ProcessSet& set = CheckLocked(process_set_id, ops);
    const int set_size = static_cast<int>(set.ranks.size());
    for (auto& op : ops) {
      RequestMeta& m = op.meta;
      m.requested_op = m.reduce_op;
      m.group_size = static_cast<int32_t>(ops.size());
      if (m.group.empty()) m.group = m.name;
      if (m.op == OpType::kBroadcast) {
        auto pos = std::find(set.ranks.begin(), set.ranks.end(), m.root_rank);
        m.set_root = static_cast<int32_t>(pos - set.ranks.begin());
      }
      // Average is a Sum whose postscale carries 1/size: done here, in C++,
      // so callers never need to know a process set's size.
      if (m.reduce_op == ReduceOp::kAverage) {
        m.reduce_op = ReduceOp::kSum;
        // Half types round to half after every pairwise add: divide before
        // the sum so that values near the half maximum cannot overflow.
        if (m.dtype == DataType::kFloat16 || m.dtype == DataType::kBFloat16) {
          m.prescale /= set_size;
        } else {
          m.postscale /= set_size;
        }
      }
      m.rank = set.group.data->rank();
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      TensorOp& op = ops[i];
      Request r;
      r.ready_event = std::move(ready[i]);
      r.meta = std::move(op.meta);
      r.process_set_id = process_set_id;
      r.input = std::move(op.input);
      r.output = std::move(op.output);
      r.sized_output = std::move(op.sized_output);
      r.enqueue_time = now;
      r.pushed_at = pushed_at;
      r.completion = completion;
      // Note [Reused names]: an op whose name is still in flight (e.g. the
      // next step's gradient bucket, already computed) waits behind it, so
      // ops of one name run in submission order on every rank.
      if (!in_flight_[process_set_id].insert(r.meta.name).second) {
        deferred_[std::make_pair(process_set_id, r.meta.name)].push_back(std::move(r));
      } else {
        queue_.push_back(std::move(r));
      }
    }
  }
  WakeLoops();
}

void Core::StartTimeline(const std::string& path, bool mark_cycles) {
  if (!timeline_.Start(path, topology_.rank, mark_cycles)) {
    throw Error(Status::InvalidArgument("cannot open timeline file '" + path + "'"));
  }
}

}  // namespace mxplugin
