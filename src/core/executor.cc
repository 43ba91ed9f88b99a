#include "core/executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "common/scale.h"
#include "core/collective_layout.h"
#include "core/sized_output.h"


namespace mxplugin {
namespace {

// Requests that may share one fused allreduce.
using FusionKey = std::tuple<int, int, int, double, double>;

FusionKey KeyOf(const Request& r) {
  return FusionKey(static_cast<int>(r.meta.dtype), static_cast<int>(r.meta.reduce_op), r.meta.device,
                   r.meta.prescale, r.meta.postscale);
}

}  // namespace

void Executor::Trace(const Request& req, const char* phase, Clock::time_point begin, Clock::time_point end) {
  if (timeline_->active()) timeline_->Record(req.meta.name, phase, begin, end);
}

// The planner's per-device policy: which allreduces are fused. On the CPU a
// tensor of direct_threshold bytes or more is reduced where it lies (a copy
// costs as much as the transfer saves); on a GPU, below
// gpu_direct_threshold_bytes (by default the fusion threshold: everything
// that fits), since another collective call costs far more than a device copy.
// A CPU data plane that batches small buffers itself (shared memory) gets
// every allreduce where it lies: the copies would be all the fusion adds.
bool Executor::Fusable(const Request& req) const {
  const int64_t bytes = req.input.num_bytes();
  if (req.meta.device == kCpuDevice && comm_->BatchesSmallBuffers()) return false;
  int64_t direct = config_.direct_threshold_bytes;
  if (req.meta.device != kCpuDevice) {
    direct = config_.gpu_direct_threshold_bytes < 0 ? config_.fusion_threshold_bytes + 1
                                                    : config_.gpu_direct_threshold_bytes;
  }
  return req.meta.op == OpType::kAllreduce && bytes < direct && bytes > 0 && bytes <= config_.fusion_threshold_bytes;
}

// Note [Fusion across priorities]: priorities order a round's work; they do
// not split it. Everything negotiated in one round is ready on every rank,
// so the round is planned as a whole: allreduces of one key are fused (or,
// where the data plane batches small buffers, batched) whatever their
// priorities, up to the fusion threshold, as Horovod does. Fusing only equal
// priorities made every gradient of DistributedOptimizer and of
// kvstore='mxplugin' (gluon.Trainer gives gradient i priority -i) a
// collective call of its own: one NCCL call each on GPUs, one flat MPI call
// each across hosts, two shared-memory barriers each within a host.
// Priority still decides order: responses are taken highest priority first
// (ties in negotiated order), a fused buffer is packed in that order, and
// each unit runs where its first request stands, so the highest-priority
// request is in the first unit to run and complete. The order depends only
// on the responses, which are the same on every rank.
Executor::Plan Executor::MakePlan(const std::vector<std::pair<Request*, const Response*>>& items,
                                  bool batch_direct) const {
  Plan plan;
  // The unit still taking requests of a key: (kind, fusion key).
  std::map<std::pair<Unit::Kind, FusionKey>, size_t> open;
  for (const auto& item : items) {
    Request& req = *item.first;
    Unit::Kind kind = Unit::Kind::kOne;
    if (req.meta.op == OpType::kAllreduce && !req.control) {
      if (Fusable(req)) {
        kind = Unit::Kind::kFused;
      } else if (batch_direct) {
        kind = Unit::Kind::kBatch;
      }
    }
    if (kind == Unit::Kind::kOne) {
      Unit unit;
      unit.requests.push_back(&req);
      unit.response = item.second;
      plan.units.push_back(std::move(unit));
      continue;
    }
    // A batch holds any scale factors (they are applied per buffer).
    const FusionKey key = kind == Unit::Kind::kFused
                              ? KeyOf(req)
                              : FusionKey(static_cast<int>(req.meta.dtype), static_cast<int>(req.meta.reduce_op), 0,
                                          0.0, 0.0);
    const int64_t bytes = AlignFusionOffset(req.input.num_bytes());
    auto it = open.find({kind, key});
    if (it == open.end() || plan.units[it->second].bytes + req.input.num_bytes() > config_.fusion_threshold_bytes) {
      Unit unit;
      unit.kind = kind;
      plan.units.push_back(std::move(unit));
      it = open.insert_or_assign({kind, key}, plan.units.size() - 1).first;
    }
    Unit& unit = plan.units[it->second];
    unit.requests.push_back(&req);
    unit.bytes += bytes;
  }
  return plan;
}

void Executor::Execute(const std::vector<Response>& responses, PendingRequests* pending) {
  const Clock::time_point negotiated = Clock::now();
  // Highest priority first (Note [Fusion across priorities]); the cached and
  // the newly negotiated responses arrive each sorted, one after the other.
  std::vector<const Response*> order;
  for (const Response& resp : responses) order.push_back(&resp);
  std::stable_sort(order.begin(), order.end(),
                   [](const Response* a, const Response* b) { return a->priority > b->priority; });
  std::vector<std::pair<Request*, const Response*>> cpu, gpu;
  std::vector<std::string> done;
  std::deque<StandIn> stand_ins;  // until this round's CPU work is done
  for (const Response* resp : order) {
    auto it = pending->find(resp->name);
    if (it == pending->end()) {
      // An error for a name this rank never submitted, or a request this
      // joined rank stands in for (the coordinator allows CPU ones only).
      const bool mine = std::find(resp->joined.begin(), resp->joined.end(), comm_->rank()) != resp->joined.end();
      if (resp->kind != Response::Kind::kOk || !mine) continue;
      stand_ins.emplace_back();
      MakeStandIn(*resp, &stand_ins.back());
      cpu.emplace_back(&stand_ins.back().request, resp);
      continue;
    }
    Request& req = it->second;
    Trace(req, "NEGOTIATE", req.enqueue_time, negotiated);
    if (resp->kind == Response::Kind::kError) {
      std::string name = resp->name;
      finish_(req, Status::Mismatch(resp->error));
      pending->erase(name);
      continue;
    }
    (req.meta.device != kCpuDevice && !req.control ? gpu : cpu).emplace_back(&req, resp);
    done.push_back(resp->name);
  }
  // GPU work is launched first: the CPU work blocks this thread.
  if (!gpu.empty()) ExecuteGpu(MakePlan(gpu, false));
  Plan plan = MakePlan(cpu, true);
  ExecuteCpu(plan);
  for (const auto& name : done) pending->erase(name);
}

void Executor::ExecuteCpu(Plan& plan) {
  for (Unit& unit : plan.units) {
    switch (unit.kind) {
      case Unit::Kind::kFused:
        try {
          RunFused(unit.requests);
        } catch (const std::exception& e) {  // thrown before any request of the group finished
          for (Request* r : unit.requests) {
            finish_(*r, Status::Internal(std::string("fused allreduce failed: ") + e.what()));
          }
        }
        break;
      case Unit::Kind::kBatch: {
        Status st;
        try {
          st = RunAllreduce(unit.requests);
        } catch (const Error& e) {
          st = e.status();
        } catch (const std::exception& e) {
          st = Status::Internal(std::string("allreduce failed: ") + e.what());
        }
        for (Request* r : unit.requests) finish_(*r, st);
        break;
      }
      case Unit::Kind::kOne: {
        Request& req = *unit.requests[0];
        Status st;
        try {
          st = RunOne(req, *unit.response);
        } catch (const Error& e) {
          st = e.status();
        }
        finish_(req, st);
        break;
      }
    }
  }
}

// The GPU executor takes the requests (moved out; their pending entries are
// erased by the caller) and finishes them when the GPU is done.
void Executor::ExecuteGpu(const Plan& plan) {
  if (!gpu_backend_->runtime) {  // Core::Check rejects GPU tensors then; a backstop
    const Status st = Status::InvalidArgument("GPU tensors: " + gpu_backend_->missing);
    for (const Unit& unit : plan.units) {
      for (Request* r : unit.requests) finish_(*r, st);
    }
    return;
  }
  if (!gpu_) {
    gpu_ = std::make_unique<gpu::GpuExecutor>(control_, config_, timeline_, finish_, stop_, gpu_backend_->runtime.get(),
                                              gpu_backend_->make_comms);
  }
  for (const Unit& unit : plan.units) {
    if (unit.kind == Unit::Kind::kOne) {
      gpu_->RunOne(std::move(*unit.requests[0]), *unit.response);
      continue;
    }
    std::vector<Request> moved;
    for (Request* r : unit.requests) moved.push_back(std::move(*r));
    gpu_->RunFused(std::move(moved));
  }
}

void Executor::BeginDrain(bool abort) {
  if (gpu_) gpu_->BeginDrain(abort);
}

void Executor::Drain() {
  if (gpu_) gpu_->Drain();
}


void Executor::RunFused(std::vector<Request*>& group) {
  if (group.size() == 1) {
    Status st = RunAllreduce({group[0]});
    finish_(*group[0], st);
    return;
  }
  const Request& first = *group[0];
  const DataType dtype = first.meta.dtype;
  const size_t esize = DataTypeSize(dtype);
  int64_t bytes = 0;
  for (Request* r : group) bytes = AlignFusionOffset(bytes) + r->input.num_bytes();
  char* buffer = buffer_.Reserve(bytes);

  auto t0 = Clock::now();
  int64_t offset = 0;
  for (Request* r : group) {
    offset = AlignFusionOffset(offset);
    CopyAndScale(buffer + offset, r->input.data, r->input.num_elements(), dtype, r->meta.prescale);
    offset += r->input.num_bytes();
  }
  auto t1 = Clock::now();
  Status st = comm_->Allreduce(buffer, buffer, static_cast<int64_t>(offset / esize), dtype, first.meta.reduce_op);
  auto t2 = Clock::now();
  if (st.ok()) {
    offset = 0;
    for (Request* r : group) {
      offset = AlignFusionOffset(offset);
      CopyAndScale(r->output.data, buffer + offset, r->output.num_elements(), dtype, r->meta.postscale);
      offset += r->input.num_bytes();
    }
  }
  auto t3 = Clock::now();
  for (Request* r : group) {
    Trace(*r, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
    Trace(*r, "ALLREDUCE", t1, t2);
    Trace(*r, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
    finish_(*r, st);
  }
}

Status Executor::RunOne(Request& req, const Response& resp) {
  if (req.control) return req.control();
  switch (req.meta.op) {
    case OpType::kAllreduce: return RunAllreduce({&req});
    case OpType::kAllgather: return RunAllgather(req, resp);
    case OpType::kBroadcast: return RunBroadcast(req);
    case OpType::kAlltoall: return RunAlltoall(req, resp);
    case OpType::kReducescatter: return RunReducescatter(req);
    case OpType::kBarrier: {
      auto t0 = Clock::now();
      // Negotiation already found every rank at the barrier; this waits
      // for the last of them to learn it, bounded like negotiation.
      Status st = control_->Barrier(Clock::now() + std::chrono::microseconds(
                                                      static_cast<int64_t>(config_.peer_timeout_seconds * 1e6)));
      Trace(req, "BARRIER", t0, Clock::now());
      return st;
    }
    case OpType::kRefusal: return Status::Ok();  // every rank refused the call alike: nothing to run
    case OpType::kJoin:  // every rank has joined (Note [Joined ranks]): which one was last
      if (req.output.data != nullptr && !resp.sizes.empty()) {
        *static_cast<int32_t*>(req.output.data) = static_cast<int32_t>(resp.sizes[0]);
      }
      return Status::Ok();
  }
  return Status::Internal("unknown op type");
}

// Direct allreduces of one dtype and op: reduced where they lie, in one call to
// the data plane (Communicator::AllreduceMany), which applies prescales and
// postscales (the shared-memory one folds both into copies it makes anyway:
// a prescale costs no pass of its own over the tensor).
Status Executor::RunAllreduce(const std::vector<Request*>& batch) {
  const Request& first = *batch[0];
  auto t0 = Clock::now();
  std::vector<Communicator::Buffer> buffers;
  for (Request* r : batch) {
    const int64_t n = r->input.num_elements();
    if (n == 0) continue;
    buffers.push_back({r->input.data, r->output.data, n, r->meta.postscale, r->meta.prescale});
  }
  Status st = buffers.empty() ? Status::Ok() : comm_->AllreduceMany(buffers, first.meta.dtype, first.meta.reduce_op);
  auto t1 = Clock::now();
  for (Request* r : batch) Trace(*r, "ALLREDUCE", t0, t1);
  return st;
}

Status Executor::RunAllgather(Request& req, const Response& resp) {
  const Status placed = req.sized_output ? SizeAllgatherOutput(req, resp) : Status::Ok();
  std::vector<int64_t> counts;
  const Status holds = AllgatherCounts(req, resp, &counts);
  void* output = req.output.data;
  std::vector<char> scratch;
  if (!holds.ok()) {
    // An output sized for other rows than the ranks send (a caller that
    // sized it without the exchange, while a rank had joined: Note [Joined
    // ranks]) fails, but only after this rank has taken part in the
    // transfer, into scratch: the others, whose outputs hold, are in it.
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    scratch.resize(static_cast<size_t>(total) * DataTypeSize(req.meta.dtype));
    output = scratch.data();
  }
  auto t0 = Clock::now();
  Status st = comm_->Allgatherv(req.input.data, req.input.num_elements(), output, counts, Displacements(counts),
                                req.meta.dtype);
  Trace(req, "ALLGATHER", t0, Clock::now());
  if (holds.ok()) return st.ok() ? placed : st;
  if (resp.joined.empty()) return holds;
  return Status(holds.code(), holds.reason() + ": rank(s) that have joined (join()) send no rows. A "
                "DistributedTrainer over uneven data needs join_when_done(trainer), not join()");
}

Status Executor::RunBroadcast(Request& req) {
  const int64_t n = req.input.num_elements();
  if (n == 0) return Status::Ok();
  auto t0 = Clock::now();
  if (comm_->rank() == req.meta.set_root && req.output.data != req.input.data) {
    std::memcpy(req.output.data, req.input.data, static_cast<size_t>(req.input.num_bytes()));
  }
  Status st = comm_->Broadcast(req.output.data, n, req.meta.dtype, req.meta.set_root);
  Trace(req, "BROADCAST", t0, Clock::now());
  return st;
}

Status Executor::RunAlltoall(Request& req, const Response& resp) {
  const Status placed =
      req.sized_output ? SizeAlltoallOutput(req, resp, comm_->rank(), comm_->size()) : Status::Ok();
  std::vector<int64_t> send_counts, recv_counts;
  Status st = AlltoallCounts(req, resp, comm_->rank(), comm_->size(), &send_counts, &recv_counts);
  if (!st.ok()) return st;
  auto t0 = Clock::now();
  st = comm_->Alltoallv(req.input.data, send_counts, Displacements(send_counts), req.output.data, recv_counts,
                        Displacements(recv_counts), req.meta.dtype);
  Trace(req, "ALLTOALL", t0, Clock::now());
  return st.ok() ? placed : st;
}

Status Executor::RunReducescatter(Request& req) {
  std::vector<int64_t> counts;
  Status st = ReducescatterCounts(req, comm_->rank(), comm_->size(), &counts);
  if (!st.ok()) return st;
  auto t0 = Clock::now();
  const void* send = req.input.data;
  if (req.meta.prescale != 1.0) {
    char* scratch = buffer_.Reserve(req.input.num_bytes());
    CopyAndScale(scratch, req.input.data, req.input.num_elements(), req.meta.dtype, req.meta.prescale);
    send = scratch;
  }
  st = comm_->ReduceScatter(send, req.output.data, counts, req.meta.dtype, req.meta.reduce_op);
  if (st.ok()) ScaleInPlace(req.output.data, req.output.num_elements(), req.meta.dtype, req.meta.postscale);
  Trace(req, "REDUCESCATTER", t0, Clock::now());
  return st;
}

}  // namespace mxplugin
