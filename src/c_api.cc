// The core's C surface; C++ failures become codes through c_api_guard.h, and
// this file keeps the per-thread message behind mxp_last_error().
#include "c_api.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "c_api_guard.h"
#include "backend/memory/memory_world.h"
#include "core/core.h"
#include "defaults.h"
#ifdef MXPLUGIN_WITH_MXNET
#include "mxnet/engine_op.h"
#include "mxnet/grad_binding.h"
#include "mxnet/host_exchange.h"
#endif

using mxplugin::Core;
using mxplugin::Error;
using mxplugin::Status;
using mxplugin::StatusCode;
using mxplugin::TensorOp;

struct mxp_core {
  std::unique_ptr<Core> core;
};

struct mxp_memory_job {
  std::shared_ptr<mxplugin::memory::MemoryJob> job;
};

struct mxp_handle {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Status status;
  // Per op: the output the core sized (Note [Outputs the core sizes]), or null.
  std::vector<std::shared_ptr<mxplugin::SizedOutput>> sized_outputs;
};

namespace {

thread_local std::string last_error;

using mxplugin::capi::Guard;
using mxplugin::capi::Report;

Core& CoreOf(mxp_core* c) {
  if (c == nullptr || !c->core) {
    throw Error(Status(StatusCode::kNotInitialized, "mxplugin has not been initialized; call init() first"));
  }
  return *c->core;
}

std::vector<int64_t> Ints(const int64_t* p, int32_t n) {
  return n > 0 ? std::vector<int64_t>(p, p + n) : std::vector<int64_t>();
}

// of_array: mxp_mxnet_enqueue's and mxp_mxnet_exchange_host's ops may leave dtype and shape to the
// adapter (MXP_DTYPE_OF_ARRAY); they are filled in there.
std::vector<TensorOp> OpsFromC(const mxp_op* ops, int32_t n, bool of_array_allowed = false) {
  std::vector<TensorOp> out(n);
  for (int32_t i = 0; i < n; ++i) {
    const mxp_op& c = ops[i];
    const bool of_array = of_array_allowed && c.dtype == MXP_DTYPE_OF_ARRAY;
    if (!of_array && !mxplugin::IsValidDataType(c.dtype)) {
      throw Error(Status::InvalidArgument("unsupported dtype code " + std::to_string(c.dtype)));
    }
    TensorOp& t = out[i];
    t.meta.name = c.name ? c.name : "";
    t.meta.op = static_cast<mxplugin::OpType>(c.op_type);
    t.meta.reduce_op = static_cast<mxplugin::ReduceOp>(c.reduce_op);
    t.meta.dtype = static_cast<mxplugin::DataType>(of_array ? MXP_DTYPE_FLOAT32 : c.dtype);  // set by the adapter
    t.meta.device = c.device;
    t.meta.shape = Ints(c.shape, c.ndim);
    t.meta.root_rank = c.root_rank;
    t.meta.prescale = c.prescale;
    t.meta.postscale = c.postscale;
    t.meta.splits = Ints(c.splits, c.nsplits);
    t.meta.priority = c.priority;
    t.meta.group = c.group ? c.group : t.meta.name;
    t.meta.zeros_when_joined = c.zeros_when_joined != 0;
    t.input.shape = t.meta.shape;
    t.input.dtype = t.meta.dtype;
    t.input.device = c.device;
    t.input.stream = c.stream;
    t.output.shape = Ints(c.out_shape, c.out_ndim);
    t.output.dtype = t.meta.dtype;
    t.output.device = c.device;
  }
  return out;
}

}  // namespace

extern "C" {

const char* mxp_last_error(void) { return last_error.c_str(); }

int mxp_set_last_error(int code, const char* message) {
  last_error = message != nullptr ? message : "";
  return code;
}

int mxp_core_create(mxp_core** out) {
  return Guard([&] {
    auto c = std::make_unique<mxp_core>();
    c->core = std::make_unique<Core>(mxplugin::Config::FromEnvironment(), mxplugin::DefaultWorld(),
                                     mxplugin::DefaultGpuBackend());
    *out = c.release();
  });
}

int mxp_memory_job_create(int32_t size, int32_t ranks_per_host, mxp_memory_job** out) {
  return Guard([&] {
    auto j = std::make_unique<mxp_memory_job>();
    j->job = std::make_shared<mxplugin::memory::MemoryJob>(size, ranks_per_host);
    *out = j.release();
  });
}

int mxp_memory_job_kill(mxp_memory_job* job, int32_t rank) {
  return Guard([&] {
    if (rank < 0 || rank >= job->job->size()) {
      throw Error(Status::InvalidArgument("no rank " + std::to_string(rank) + " in this in-memory job"));
    }
    job->job->Kill(rank);
  });
}

int mxp_memory_job_counts(mxp_memory_job* job, int64_t* rounds, int64_t* full_rounds) {
  return Guard([&] {
    *rounds = job->job->counts()->bit_allreduces.load();
    *full_rounds = job->job->counts()->gathers.load();
  });
}

int mxp_memory_job_reductions(mxp_memory_job* job, int64_t* calls) {
  return Guard([&] { *calls = job->job->counts()->reductions.load(); });
}

void mxp_memory_job_destroy(mxp_memory_job* job) { delete job; }

int mxp_core_create_in_memory(mxp_memory_job* job, int32_t rank, mxp_core** out) {
  return Guard([&] {
    auto shared = job->job;
    auto c = std::make_unique<mxp_core>();
    c->core = std::make_unique<Core>(
        mxplugin::Config::FromEnvironment(),
        [shared, rank](const mxplugin::Config&) { return mxplugin::memory::MakeMemoryWorld(shared, rank); },
        mxplugin::DefaultGpuBackend());
    *out = c.release();
  });
}

int mxp_core_shutdown(mxp_core* core) {
  return Guard([&] { CoreOf(core).Shutdown(); });
}

// Stops the core but keeps the object: engine ops pushed earlier may still run
// (and call Enqueue, which then fails with "shut down") after Python dropped
// its handle, e.g. at interpreter exit. One stopped Core per process is cheap.
void mxp_core_destroy(mxp_core* core) {
  if (core != nullptr && core->core) core->core->Shutdown();
}

int mxp_core_topology(mxp_core* core, mxp_topology* out) {
  return Guard([&] {
    const auto& t = CoreOf(core).topology();
    *out = mxp_topology{t.rank, t.size, t.local_rank, t.local_size, t.cross_rank, t.cross_size,
                        t.threads_multiple ? 1 : 0};
  });
}

int mxp_core_stuck_transfer(mxp_core* core, char* text, int32_t capacity) {
  return Guard([&] {
    if (capacity <= 0) return;
    const std::string why = CoreOf(core).StuckTransfer();
    const size_t n = std::min(why.size(), static_cast<size_t>(capacity - 1));
    std::memcpy(text, why.data(), n);
    text[n] = '\0';
  });
}

int mxp_core_keep_running_when_stuck(mxp_core* core) {
  return Guard([&] { CoreOf(core).KeepRunningWhenStuck(); });
}

int mxp_core_say_lost_peers(mxp_core* core, const char* marker) {
  return Guard([&] { CoreOf(core).SayLostPeers(marker != nullptr ? marker : ""); });
}

int mxp_core_last_failure(mxp_core* core, int32_t* code) {
  return Guard([&] { *code = static_cast<int32_t>(CoreOf(core).LastFailure()); });
}

int mxp_core_begin_push_batch(mxp_core* core) {
  return Guard([&] { CoreOf(core).BeginPushBatch(); });
}

int mxp_core_end_push_batch(mxp_core* core) {
  return Guard([&] { CoreOf(core).EndPushBatch(); });
}

int mxp_core_leave_world(mxp_core* core, double seconds, int32_t* parked) {
  return Guard([&] { *parked = CoreOf(core).LeaveWorld(seconds) ? 1 : 0; });
}

int mxp_add_process_set(mxp_core* core, const int32_t* ranks, int32_t n, int32_t* id) {
  return Guard([&] { *id = CoreOf(core).AddProcessSet(std::vector<int>(ranks, ranks + n)); });
}

int mxp_remove_process_set(mxp_core* core, int32_t id, int32_t* removed) {
  return Guard([&] { *removed = CoreOf(core).RemoveProcessSet(id) ? 1 : 0; });
}

int mxp_process_set_ranks(mxp_core* core, int32_t id, int32_t* ranks, int32_t capacity, int32_t* n) {
  return Guard([&] {
    auto r = CoreOf(core).ProcessSetRanks(id);
    *n = static_cast<int32_t>(r.size());
    for (int32_t i = 0; i < *n && i < capacity; ++i) ranks[i] = r[i];
  });
}

int mxp_process_set_rank(mxp_core* core, int32_t id, int32_t* rank) {
  return Guard([&] { *rank = CoreOf(core).ProcessSetRank(id); });
}

int mxp_reference_allreduce(mxp_core* core, void* data, int64_t count, int32_t dtype, double* seconds) {
  return Guard([&] {
    if (!mxplugin::IsValidDataType(dtype)) {
      throw Error(Status::InvalidArgument("unsupported dtype code " + std::to_string(dtype)));
    }
    *seconds = CoreOf(core).ReferenceAllreduce(data, count, static_cast<mxplugin::DataType>(dtype));
  });
}

int mxp_start_timeline(mxp_core* core, const char* path, int32_t mark_cycles) {
  return Guard([&] { CoreOf(core).StartTimeline(path, mark_cycles != 0); });
}

int mxp_stop_timeline(mxp_core* core) {
  return Guard([&] { CoreOf(core).StopTimeline(); });
}

int mxp_enqueue_raw(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, mxp_handle** out) {
  return Guard([&] {
    auto ts = OpsFromC(ops, n);
    auto handle = std::make_unique<mxp_handle>();
    handle->sized_outputs.resize(n);
    for (int32_t i = 0; i < n; ++i) {
      ts[i].input.data = ops[i].input;
      ts[i].output.data = ops[i].output;
      if ((ops[i].op_type == MXP_OP_ALLGATHER || ops[i].op_type == MXP_OP_ALLTOALL) && ops[i].output == nullptr) {
        ts[i].sized_output = handle->sized_outputs[i] = std::make_shared<mxplugin::SizedOutput>();
      }
    }
    mxp_handle* h = handle.get();
    CoreOf(core).Enqueue(process_set_id, std::move(ts), [h](const Status& s) {
      std::lock_guard<std::mutex> lock(h->mutex);
      h->status = s;
      h->done = true;
      h->cv.notify_all();
    });
    *out = handle.release();
  });
}

int mxp_handle_done(mxp_handle* handle, int32_t* done) {
  std::lock_guard<std::mutex> lock(handle->mutex);
  *done = handle->done ? 1 : 0;
  return 0;
}

int mxp_handle_wait(mxp_handle* handle) {
  std::unique_lock<std::mutex> lock(handle->mutex);
  handle->cv.wait(lock, [handle] { return handle->done; });
  return Report(handle->status);
}

int mxp_handle_output(mxp_handle* handle, int32_t index, const void** data, int64_t* bytes, int64_t* rows) {
  return Guard([&] {
    std::lock_guard<std::mutex> lock(handle->mutex);
    if (!handle->done || index < 0 || index >= static_cast<int32_t>(handle->sized_outputs.size()) ||
        !handle->sized_outputs[index]) {
      throw Error(Status::InvalidArgument("no output sized by the core for op " + std::to_string(index) +
                                          " of this call (or the call has not finished)"));
    }
    *data = handle->sized_outputs[index]->bytes.data();
    *bytes = static_cast<int64_t>(handle->sized_outputs[index]->bytes.size());
    *rows = handle->sized_outputs[index]->rows;
  });
}

void mxp_handle_free(mxp_handle* handle) {
  if (handle == nullptr) return;
  {
    // Never free a handle the background thread may still signal.
    std::unique_lock<std::mutex> lock(handle->mutex);
    handle->cv.wait(lock, [handle] { return handle->done; });
  }
  delete handle;
}

int mxp_mxnet_enqueue(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, int32_t priority,
                      void** made) {
  return Guard([&] {
    Core& c = CoreOf(core);
    auto ts = OpsFromC(ops, n, true);
    std::vector<void*> inputs(n), outputs(n);
    std::vector<bool> of_array(n);
    for (int32_t i = 0; i < n; ++i) {
      inputs[i] = ops[i].input;
      outputs[i] = ops[i].output;
      of_array[i] = ops[i].dtype == MXP_DTYPE_OF_ARRAY;
    }
#ifdef MXPLUGIN_WITH_MXNET
    std::vector<void*> made_here;
    mxplugin::mxnet_adapter::PushCollective(&c, process_set_id, std::move(ts), inputs, std::move(outputs), of_array,
                                            priority, made != nullptr ? &made_here : nullptr);
    std::copy(made_here.begin(), made_here.end(), made);
#else
    (void)c, (void)process_set_id, (void)priority, (void)made;
    throw Error(Status::InvalidArgument("mxplugin was built without MXNet (MXPLUGIN_WITH_MXNET=0)"));
#endif
  });
}

int mxp_mxnet_exchange_host(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, void** outputs,
                            int64_t* from_each, int32_t set_size, int64_t* total_bytes, int32_t* declined) {
  *total_bytes = -1;
  *declined = 0;
  return Guard([&] {
    Core& c = CoreOf(core);
    auto ts = OpsFromC(ops, n, true);
    std::vector<void*> inputs(n), made;
    for (int32_t i = 0; i < n; ++i) inputs[i] = ops[i].input;
#ifdef MXPLUGIN_WITH_MXNET
    std::vector<std::vector<int64_t>> rows;
    if (!mxplugin::mxnet_adapter::ExchangeHost(&c, process_set_id, set_size, std::move(ts), inputs, &made, &rows,
                                               total_bytes)) {
      *declined = 1;
      return;
    }
    std::copy(made.begin(), made.end(), outputs);
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t r = 0; r < set_size; ++r) {
        from_each[static_cast<size_t>(i) * set_size + r] = r < static_cast<int32_t>(rows[i].size()) ? rows[i][r] : 0;
      }
    }
#else
    (void)c, (void)process_set_id, (void)outputs, (void)from_each, (void)set_size, (void)total_bytes;
    throw Error(Status::InvalidArgument("mxplugin was built without MXNet (MXPLUGIN_WITH_MXNET=0)"));
#endif
  });
}

int mxp_mxnet_grads_bound(void* const* weights, void* const* grads, int32_t n, int32_t* out) {
  return Guard([&] {
#ifdef MXPLUGIN_WITH_MXNET
    mxplugin::mxnet_adapter::GradientsBound(weights, grads, n, out);
#else
    (void)weights, (void)grads, (void)n, (void)out;
    throw Error(Status::InvalidArgument("mxplugin was built without MXNet (MXPLUGIN_WITH_MXNET=0)"));
#endif
  });
}

int mxp_cuda_built(void) {
#ifdef MXPLUGIN_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

int mxp_nccl_built(void) {
#ifdef MXPLUGIN_WITH_NCCL
  return MXPLUGIN_NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

}  // extern "C"
