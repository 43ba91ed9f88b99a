// The Core's GPU path end to end on host memory, with the stand-ins of
// host_gpu.h as its GpuBackend. Without arguments: GPU tensors negotiated
// and run next to CPU ones in one grouped call, a tensor on the CPU of one
// rank and a GPU of another failing as a mismatch on every rank, and a GPU
// failure stopping the Core (Note [GPU failures are fatal]) with the cause
// as the reason later ops fail. With "one-rank-fails" (asynchronous
// stand-ins): rank 1's launch fails while its peers' allreduce waits for it
// on their lanes; every rank must stop, and the peers' stuck work must be
// aborted and fail at once, since negotiation says a rank failed. Built and run under mpiexec by
// tests/test_gpu_executor_host.py; prints PASS <rank>.
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/mpi/mpi_world.h"
#include "core/core.h"
#include "host_gpu.h"

using namespace mxplugin;
using namespace mxplugin::host_gpu;

namespace {

struct Done {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

std::shared_ptr<Done> Submit(Core& core, std::vector<TensorOp> ops) {
  auto done = std::make_shared<Done>();
  core.Enqueue(0, std::move(ops), [done](const Status& s) {
    std::lock_guard<std::mutex> lock(done->mutex);
    done->status = s;
    done->done = true;
    done->cv.notify_all();
  });
  return done;
}

Status Wait(const std::shared_ptr<Done>& done) {
  std::unique_lock<std::mutex> lock(done->mutex);
  EXPECT(done->cv.wait_for(lock, std::chrono::seconds(60), [&] { return done->done; }), "an op did not complete");
  return done->status;
}

TensorOp Op(const std::string& name, OpType op, DataType dtype, int device, void* in, void* out,
            std::vector<int64_t> shape, std::vector<int64_t> out_shape, void* stream = nullptr) {
  TensorOp t;
  t.meta.name = name;
  t.meta.op = op;
  t.meta.dtype = dtype;
  t.meta.device = device;
  t.meta.shape = shape;
  t.input = TensorRef{in, shape, dtype, device, stream};
  t.output = TensorRef{out, out_shape, dtype, device, nullptr};
  return t;
}

double Value(int rank, int tensor, int i) { return (rank + 1) * 0.25 + tensor + (i % 5) * 0.5; }

// Keeps enqueueing small CPU ops until the Core refuses them (it has
// stopped); returns the reason it gives, or "" after 30 s.
std::string WaitUntilStopped(Core& core) {
  static float x[4];
  for (int i = 0; i < 600; ++i) {
    try {
      Submit(core, {Op("after." + std::to_string(i), OpType::kAllreduce, DataType::kFloat32, kCpuDevice, x, x, {4},
                       {4})});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } catch (const Error& e) {
      return e.status().reason();
    }
  }
  return "";
}

// Rank 1 fails before its collective; the others are left waiting in theirs.
int OneRankFails() {
  Config config = Config::FromEnvironment();
  config.num_streams = 2;
  config.peer_timeout_seconds = 4;  // the drain then aborts stuck work after 4 s
  auto runtime = std::make_shared<HostRuntime>(true, /*async=*/true);
  GpuBackend backend;
  backend.runtime = runtime;
  backend.make_comms = [](ControlPlane*, int, const std::vector<void*>& streams, const Status& local_error,
                          Clock::time_point, Clock::duration,
                          std::vector<std::unique_ptr<GpuCommunicator>>* out) -> Status {
    if (!local_error.ok()) return local_error;
    for (void* s : streams) {
      MPI_Comm comm;
      MPI_Comm_dup(MPI_COMM_WORLD, &comm);
      out->push_back(std::make_unique<AsyncHostComm>(comm, static_cast<HostStream*>(s)));
    }
    return Status::Ok();
  };
  Core core(config, &MakeMpiWorld, std::move(backend));
  const int rank = core.topology().rank, size = core.topology().size;
  g_rank = rank;
  EXPECT(size >= 2, "run at 2 ranks or more");

  std::vector<float> w(1000);
  for (int i = 0; i < 1000; ++i) w[i] = static_cast<float>(Value(rank, 0, i));
  Status st = Wait(Submit(core, {Op("healthy", OpType::kAllreduce, DataType::kFloat32, 0, w.data(), w.data(), {1000},
                                    {1000})}));
  EXPECT(st.ok(), "healthy: " + st.reason());
  double want = 0;
  for (int r = 0; r < size; ++r) want += Value(r, 0, 7);
  EXPECT(std::fabs(w[7] - want) <= 1e-5 * want, "asynchronous allreduce");

  std::vector<float> x(1000, 1.0f);
  const auto t0 = Clock::now();
  st = Wait(Submit(core, {Op("x", OpType::kAllreduce, DataType::kFloat32, 0, x.data(), x.data(), {1000}, {1000},
                             rank == 1 ? kPoisonedStream : nullptr)}));
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  if (rank == 1) {
    EXPECT(st.reason().find("poisoned ready event") != std::string::npos, "the failing rank: " + st.reason());
  } else {
    // Told through negotiation, not by waiting out the drain grace (4 s here).
    EXPECT(st.code() == StatusCode::kAborted && st.reason().find("another rank stopped after a failure") !=
                                                    std::string::npos,
           "a waiting rank: " + st.reason());
    EXPECT(waited < 3, "the waiting op failed only after " + std::to_string(waited) + " s");
  }
  const std::string stopped = WaitUntilStopped(core);
  EXPECT(!stopped.empty(), "the Core did not stop");
  EXPECT(rank == 1 ? stopped.find("poisoned ready event") != std::string::npos
                   : stopped.find("another rank failed") != std::string::npos,
         "stopped with: " + stopped);
  core.Shutdown();
  std::printf("rank %d: failed after %.1f s; stopped: %s\nPASS %d\n", rank, waited, stopped.c_str(), rank);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "one-rank-fails") return OneRankFails();
  Config config = Config::FromEnvironment();
  // Pinned: which path each tensor takes below must not depend on the environment.
  config.num_streams = 2;
  config.fusion_threshold_bytes = 64 << 20;
  config.direct_threshold_bytes = 256 << 10;
  config.gpu_direct_threshold_bytes = -1;  // the GPU policy's default: fuse everything that fits
  config.cache_capacity = 1024;
  auto runtime = std::make_shared<HostRuntime>(true);
  GpuBackend backend;
  backend.runtime = runtime;
  auto lanes = std::make_shared<std::vector<HostComm*>>();  // owned by the Core's executor
  auto world = std::make_shared<World*>(nullptr);  // the Core's, for the lanes' MPI groups
  backend.make_comms = [lanes, world](ControlPlane* bootstrap, int, const std::vector<void*>& streams,
                               const Status& local_error, Clock::time_point, Clock::duration,
                               std::vector<std::unique_ptr<GpuCommunicator>>* out) -> Status {
    if (!local_error.ok()) return local_error;
    for (void* s : streams) {
      auto lane = std::make_unique<HostComm>(MpiLane(*world, bootstrap), s);
      lanes->push_back(lane.get());
      out->push_back(std::move(lane));
    }
    return Status::Ok();
  };
  auto reductions = [lanes] {
    int n = 0;
    for (HostComm* lane : *lanes) n += lane->reductions.load();
    return n;
  };
  Core core(config,
            [world](const Config& c) {
              auto made = MakeMpiWorld(c);
              *world = made.get();
              return made;
            },
            std::move(backend));
  const int rank = core.topology().rank, size = core.topology().size;
  g_rank = rank;

  {  // GPU and CPU tensors in one grouped call: the GPU ones fused, the large
     // one too (the GPU policy), all averaged; a GPU broadcast from the last rank
    std::vector<std::vector<float>> in(8), out(8);
    std::vector<TensorOp> ops;
    for (int t = 0; t < 8; ++t) {
      const int n = t == 6 ? 70000 : 5 + 3 * t;  // 70000 floats: above the direct threshold
      in[t].resize(n);
      out[t].assign(n, -1.0f);
      for (int i = 0; i < n; ++i) in[t][i] = static_cast<float>(Value(rank, t, i));
      const int device = t == 7 ? kCpuDevice : 0;
      ops.push_back(Op("grad." + std::to_string(t), OpType::kAllreduce, DataType::kFloat32, device, in[t].data(),
                       out[t].data(), {n}, {n}));
      ops.back().meta.reduce_op = ReduceOp::kAverage;
    }
    std::vector<double> root_in(6), root_out(6, -1);
    for (int i = 0; i < 6; ++i) root_in[i] = rank * 10 + i;
    ops.push_back(Op("weights", OpType::kBroadcast, DataType::kFloat64, 0, root_in.data(), root_out.data(), {6}, {6}));
    ops.back().meta.root_rank = size - 1;
    Status st = Wait(Submit(core, std::move(ops)));
    EXPECT(st.ok(), st.reason());
    for (int t = 0; t < 8; ++t) {
      for (size_t i = 0; i < out[t].size(); ++i) {
        double want = 0;
        for (int r = 0; r < size; ++r) want += Value(r, t, static_cast<int>(i));
        want /= size;
        EXPECT(std::fabs(out[t][i] - want) <= 1e-5 * std::fabs(want), "average of grad." + std::to_string(t));
      }
    }
    for (int i = 0; i < 6; ++i) EXPECT(root_out[i] == (size - 1) * 10 + i, "broadcast");
    // (at one rank no call at all: Note [One rank needs no collective])
    EXPECT(reductions() == (size == 1 ? 0 : 1), "7 GPU allreduces, one of 280 KB, should be one fused call, not " +
                                                    std::to_string(reductions()));
    // the same names again: the second round comes from the response cache
    std::vector<TensorOp> again;
    for (int t = 0; t < 8; ++t) {
      const int n = static_cast<int>(in[t].size());
      again.push_back(Op("grad." + std::to_string(t), OpType::kAllreduce, DataType::kFloat32, t == 7 ? kCpuDevice : 0,
                         in[t].data(), in[t].data(), {n}, {n}));
    }
    st = Wait(Submit(core, std::move(again)));
    EXPECT(st.ok(), st.reason());
    double want = 0;
    for (int r = 0; r < size; ++r) want += Value(r, 6, 3);
    EXPECT(std::fabs(in[6][3] - want) <= 1e-5 * want, "cached GPU allreduce in place");
  }
  {  // 20 GPU tensors of 4 MB (80 MB): fused into as few calls as the 64 MB
     // fusion threshold allows (2), not one call per large tensor
    const int before = reductions();
    std::vector<std::vector<float>> big(20, std::vector<float>(1 << 20));
    std::vector<TensorOp> ops;
    for (int t = 0; t < 20; ++t) {
      for (size_t i = 0; i < big[t].size(); i += 4096) big[t][i] = static_cast<float>(rank + t);
      ops.push_back(Op("big." + std::to_string(t), OpType::kAllreduce, DataType::kFloat32, 0, big[t].data(),
                       big[t].data(), {1 << 20}, {1 << 20}));
    }
    Status st = Wait(Submit(core, std::move(ops)));
    EXPECT(st.ok(), st.reason());
    EXPECT(reductions() - before == (size == 1 ? 0 : 2),
           "80 MB of GPU allreduces took " + std::to_string(reductions() - before) + " calls, want 2 (0 at one rank)");
    for (int t = 0; t < 20; ++t) {
      EXPECT(big[t][4096] == static_cast<float>(size * t + size * (size - 1) / 2), "big fused sum");
    }
  }
  {  // 50 GPU allreduces submitted together, each with a priority of its own
     // (gradient i at priority -i, as DistributedOptimizer and
     // kvstore='mxplugin' give them): one fused call (Note [Fusion across
     // priorities]), each result its own sum
    const int before = reductions();
    std::vector<std::vector<float>> grads(50);
    std::vector<TensorOp> ops;
    for (int t = 0; t < 50; ++t) {
      const int n = 10 + 7 * t;
      grads[t].resize(n);
      for (int i = 0; i < n; ++i) grads[t][i] = static_cast<float>(Value(rank, t, i));
      ops.push_back(Op("prio." + std::to_string(t), OpType::kAllreduce, DataType::kFloat32, 0, grads[t].data(),
                       grads[t].data(), {n}, {n}));
      ops.back().meta.priority = -t;
    }
    Status st = Wait(Submit(core, std::move(ops)));
    EXPECT(st.ok(), st.reason());
    EXPECT(reductions() - before == (size == 1 ? 0 : 1),
           "50 GPU allreduces of distinct priorities took " + std::to_string(reductions() - before) +
               " lane calls, want 1 (0 at one rank)");
    for (int t = 0; t < 50; ++t) {
      for (size_t i = 0; i < grads[t].size(); ++i) {
        double want = 0;
        for (int r = 0; r < size; ++r) want += Value(r, t, static_cast<int>(i));
        EXPECT(std::fabs(grads[t][i] - want) <= 1e-5 * want, "prio." + std::to_string(t));
      }
    }
  }
  {  // a GPU tensor not aligned to its element size is refused at enqueue,
     // naming it (a kernel or NCCL would fault on it and lose the context)
    std::vector<float> x(9, 1.0f);
    float* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(x.data()) + 2);
    std::string refused;
    try {
      Submit(core, {Op("misaligned", OpType::kAllreduce, DataType::kFloat32, 0, odd, odd, {8}, {8})});
    } catch (const Error& e) {
      refused = e.status().reason();
    }
    EXPECT(refused.find("'misaligned'") != std::string::npos && refused.find("not aligned") != std::string::npos &&
               refused.find("float32's 4-byte elements") != std::string::npos,
           "a misaligned GPU pointer was not refused at enqueue: '" + refused + "'");
  }
  if (size > 1) {  // CPU on rank 0, GPU elsewhere: a mismatch for everyone, naming the device
    std::vector<float> x(4, 1.0f);
    Status st = Wait(Submit(core, {Op("mixed.w", OpType::kAllreduce, DataType::kFloat32, rank == 0 ? kCpuDevice : 0,
                                      x.data(), x.data(), {4}, {4})}));
    EXPECT(st.code() == StatusCode::kMismatch && st.reason().find("mixed.w") != std::string::npos &&
               st.reason().find("device") != std::string::npos,
           "mismatch: " + st.reason());
  }
  {  // a GPU failure after the lane was picked (here on every rank) stops the
     // Core; later ops fail with the cause
    std::vector<float> x(4, 1.0f);
    Status st = Wait(Submit(core, {Op("poisoned", OpType::kAllreduce, DataType::kFloat32, 0, x.data(), x.data(), {4},
                                      {4}, kPoisonedStream)}));
    EXPECT(st.reason().find("poisoned ready event") != std::string::npos, "poisoned: " + st.reason());
    const std::string stopped = WaitUntilStopped(core);
    EXPECT(stopped.find("GPU collectives failed") != std::string::npos &&
               stopped.find("poisoned ready event") != std::string::npos,
           "the Core did not stop with the GPU failure as its reason: '" + stopped + "'");
  }
  core.Shutdown();
  std::printf("PASS %d\n", rank);
  std::fflush(stdout);
  return 0;
}
