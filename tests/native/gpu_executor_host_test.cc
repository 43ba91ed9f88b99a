// The GPU executor (src/core/gpu_executor.cc) run on host memory, so that
// its planning, packing, lanes, completion thread and failure handling are
// tested where there is no GPU, with the stand-ins of host_gpu.h; the lanes'
// call hashes are compared across ranks at the end.
// This checks the executor's logic, not CUDA or NCCL: tests/test_nccl.py does
// that on a GPU. Built and run under mpiexec by tests/test_gpu_executor_host.py;
// prints PASS <rank>.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/mpi/mpi_world.h"
#include "common/half.h"
#include "core/fusion_buffer.h"
#include "core/gpu_executor.h"
#include "host_gpu.h"

using namespace mxplugin;
using namespace mxplugin::host_gpu;

namespace {

// Collects finishes: each request must finish exactly once.
struct Finishes {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::string, int> count;
  std::map<std::string, Status> status;
  std::vector<Status> fatal;

  void Finish(Request& r, const Status& s) {
    std::lock_guard<std::mutex> lock(mutex);
    ++count[r.meta.name];
    status[r.meta.name] = s;
    cv.notify_all();
  }
  // Waits until every named request has finished, then checks each did once.
  void WaitFor(const std::vector<std::string>& names) {
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT(cv.wait_for(lock, std::chrono::seconds(60),
                       [&] {
                         for (const auto& n : names) {
                           if (count[n] == 0) return false;
                         }
                         return true;
                       }),
           "requests did not finish in time");
    for (const auto& n : names) EXPECT(count[n] == 1, n + " finished " + std::to_string(count[n]) + " times");
  }
};

struct Fixture {
  World* world;
  Config config;
  Timeline timeline;
  HostRuntime runtime;
  Finishes finishes;
  std::vector<HostComm*> lanes;
  std::unique_ptr<gpu::GpuExecutor> exec;

  Fixture(World* w, int streams, bool stream_ordered, double peer_timeout = 60)
      : world(w), runtime(stream_ordered) {
    config.num_streams = streams;
    config.peer_timeout_seconds = peer_timeout;
    exec = std::make_unique<gpu::GpuExecutor>(
        &world->control(), config, &timeline, [this](Request& r, const Status& s) { finishes.Finish(r, s); },
        [this](const Status& s) {
          std::lock_guard<std::mutex> lock(finishes.mutex);
          finishes.fatal.push_back(s);
        },
        &runtime,
        [this](ControlPlane* bootstrap, int, const std::vector<void*>& streams, const Status& local_error,
               Clock::time_point, Clock::duration, std::vector<std::unique_ptr<GpuCommunicator>>* out) -> Status {
          if (!local_error.ok()) return local_error;
          for (void* s : streams) {
            auto comm = std::make_unique<HostComm>(MpiLane(world, bootstrap), s);
            lanes.push_back(comm.get());
            out->push_back(std::move(comm));
          }
          return Status::Ok();
        });
  }
};

Request MakeRequest(const std::string& name, OpType op, DataType dtype, void* in, void* out,
                    std::vector<int64_t> in_shape, std::vector<int64_t> out_shape) {
  Request r;
  r.meta.name = name;
  r.meta.op = op;
  r.meta.dtype = dtype;
  r.meta.device = 0;
  r.meta.shape = in_shape;
  r.input = TensorRef{in, in_shape, dtype, 0};
  r.output = TensorRef{out, out_shape, dtype, 0};
  return r;
}

double Value(int rank, int tensor, int i) { return (rank + 1) * 0.5 + tensor * 0.25 + (i % 7) * 0.125; }

// Fused groups of float32 and float64 tensors with prescale/postscale, in
// place and out of place, several groups so every lane is used.
void CheckFusedAllreduce(Fixture& f, int size, const std::string& tag) {
  std::vector<std::vector<float>> f32_in, f32_out;
  std::vector<std::vector<double>> f64_buf;
  const double pre = 0.5, post = 3.0;
  std::vector<std::string> names;
  for (int g = 0; g < 4; ++g) {
    std::vector<Request> group;
    for (int t = 0; t < 5; ++t) {
      const int id = g * 5 + t;
      const int n = 3 + 17 * t + g;  // odd sizes: offsets must be aligned by the executor
      f32_in.emplace_back(n);
      f32_out.emplace_back(n, -1.0f);
      for (int i = 0; i < n; ++i) f32_in.back()[i] = static_cast<float>(Value(g_rank, id, i));
      std::string name = tag + ".f32." + std::to_string(id);
      Request r = MakeRequest(name, OpType::kAllreduce, DataType::kFloat32, f32_in.back().data(),
                              f32_out.back().data(), {n}, {n});
      r.meta.prescale = pre;
      r.meta.postscale = post;
      group.push_back(std::move(r));
      names.push_back(name);
    }
    f.exec->RunFused(std::move(group));
  }
  std::vector<Request> group64;
  for (int t = 0; t < 3; ++t) {
    const int n = 1000 + t;
    f64_buf.emplace_back(n);
    for (int i = 0; i < n; ++i) f64_buf.back()[i] = Value(g_rank, 100 + t, i);
    std::string name = tag + ".f64.inplace." + std::to_string(t);
    group64.push_back(MakeRequest(name, OpType::kAllreduce, DataType::kFloat64, f64_buf.back().data(),
                                  f64_buf.back().data(), {n}, {n}));
    names.push_back(name);
  }
  f.exec->RunFused(std::move(group64));
  f.finishes.WaitFor(names);
  for (const auto& name : names) EXPECT(f.finishes.status[name].ok(), name + ": " + f.finishes.status[name].reason());
  for (size_t id = 0; id < f32_out.size(); ++id) {
    for (size_t i = 0; i < f32_out[id].size(); ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += Value(r, static_cast<int>(id), static_cast<int>(i)) * pre;
      want *= post;
      EXPECT(std::fabs(f32_out[id][i] - want) <= 1e-5 * std::fabs(want) + 1e-6,
             "fused f32 tensor " + std::to_string(id) + " element " + std::to_string(i));
    }
  }
  for (size_t t = 0; t < f64_buf.size(); ++t) {
    for (size_t i = 0; i < f64_buf[t].size(); ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += Value(r, 100 + static_cast<int>(t), static_cast<int>(i));
      EXPECT(std::fabs(f64_buf[t][i] - want) <= 1e-12 * std::fabs(want), "fused f64 in place");
    }
  }
}

// Every op through RunOne: a scaled direct allreduce (the pre-multiplied sum),
// min over int32 with a postscale (scale passes), allgather and
// reducescatter with uneven blocks, broadcast out of place, alltoall.
void CheckCollectives(Fixture& f, int size) {
  const int me = g_rank;
  std::vector<std::string> names;
  // direct scaled sum
  std::vector<float> big(70000), big_out(70000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(Value(me, 7, static_cast<int>(i)));
  Request sum = MakeRequest("one.sum", OpType::kAllreduce, DataType::kFloat32, big.data(), big_out.data(), {70000},
                            {70000});
  sum.meta.prescale = 0.5;
  sum.meta.postscale = 1.0 / size;
  f.exec->RunOne(std::move(sum), Response{});
  names.push_back("one.sum");
  // Scaled direct sums of 200,003 float16 and float64 elements (prescale 0.5,
  // postscale 3), out of place and in place: sizes for which NCCL's one-rank
  // pre-multiplied sum leaves the last 3 elements unwritten (the lane
  // stand-in models it). Every element must come out right at every size.
  constexpr int kOdd = 200003;
  std::vector<double> f64_odd(kOdd), f64_odd_out(kOdd, 0.0), f64_odd_inplace(kOdd);
  std::vector<uint16_t> f16_odd(kOdd), f16_odd_out(kOdd, 0);
  for (int i = 0; i < kOdd; ++i) {
    f64_odd[i] = f64_odd_inplace[i] = Value(me, 11, i);
    f16_odd[i] = FloatToHalf(static_cast<float>(i % 7 + me));
  }
  for (auto& c : std::vector<std::tuple<std::string, DataType, void*, void*>>{
           {"one.f64.out", DataType::kFloat64, f64_odd.data(), f64_odd_out.data()},
           {"one.f64.in", DataType::kFloat64, f64_odd_inplace.data(), f64_odd_inplace.data()},
           {"one.f16.out", DataType::kFloat16, f16_odd.data(), f16_odd_out.data()}}) {
    Request r = MakeRequest(std::get<0>(c), OpType::kAllreduce, std::get<1>(c), std::get<2>(c), std::get<3>(c),
                            {kOdd}, {kOdd});
    r.meta.prescale = 0.5;
    r.meta.postscale = 3.0;
    f.exec->RunOne(std::move(r), Response{});
    names.push_back(std::get<0>(c));
  }
  // int32 min, postscale 2 (integers: a separate pass)
  std::vector<int32_t> ints(9), ints_out(9);
  for (int i = 0; i < 9; ++i) ints[i] = (me + 1) * 10 - i;
  Request mn = MakeRequest("one.min", OpType::kAllreduce, DataType::kInt32, ints.data(), ints_out.data(), {9}, {9});
  mn.meta.reduce_op = ReduceOp::kMin;
  mn.meta.postscale = 2.0;
  f.exec->RunOne(std::move(mn), Response{});
  names.push_back("one.min");
  // allgather: rank r sends r + 1 rows of 3
  std::vector<float> ag_in((me + 1) * 3);
  for (size_t i = 0; i < ag_in.size(); ++i) ag_in[i] = static_cast<float>(me * 100 + i);
  int total_rows = 0;
  Response ag_resp;
  for (int r = 0; r < size; ++r) {
    ag_resp.sizes.push_back(r + 1);
    total_rows += r + 1;
  }
  std::vector<float> ag_out(total_rows * 3, -1);
  f.exec->RunOne(MakeRequest("one.allgather", OpType::kAllgather, DataType::kFloat32, ag_in.data(), ag_out.data(),
                             {me + 1, 3}, {total_rows, 3}),
                 ag_resp);
  names.push_back("one.allgather");
  // broadcast from the last rank, out of place
  std::vector<double> bc_in(11), bc_out(11, -1);
  for (int i = 0; i < 11; ++i) bc_in[i] = me * 1000 + i;
  Request bc = MakeRequest("one.broadcast", OpType::kBroadcast, DataType::kFloat64, bc_in.data(), bc_out.data(), {11},
                           {11});
  bc.meta.root_rank = bc.meta.set_root = size - 1;  // the world is the set
  f.exec->RunOne(std::move(bc), Response{});
  names.push_back("one.broadcast");
  // alltoall: rank r sends (r + d) % 3 rows of 2 to rank d
  Response a2a_resp;
  std::vector<int64_t> my_splits;
  for (int r = 0; r < size; ++r) {
    for (int d = 0; d < size; ++d) a2a_resp.sizes.push_back((r + d) % 3);
  }
  for (int d = 0; d < size; ++d) my_splits.push_back((me + d) % 3);
  int send_rows = 0, recv_rows = 0;
  for (int d = 0; d < size; ++d) send_rows += (me + d) % 3;
  for (int r = 0; r < size; ++r) recv_rows += (r + me) % 3;
  std::vector<int32_t> a2a_in(send_rows * 2), a2a_out(recv_rows * 2, -1);
  for (size_t i = 0; i < a2a_in.size(); ++i) a2a_in[i] = me * 1000 + static_cast<int32_t>(i);
  Request a2a = MakeRequest("one.alltoall", OpType::kAlltoall, DataType::kInt32, a2a_in.data(), a2a_out.data(),
                            {send_rows, 2}, {recv_rows, 2});
  a2a.meta.splits = my_splits;
  f.exec->RunOne(std::move(a2a), a2a_resp);
  names.push_back("one.alltoall");
  // reducescatter: 2 * size + 1 rows of 4 (rank 0 gets the extra row), prescale 2
  const int rs_rows = 2 * size + 1;
  std::vector<int> blocks(size, rs_rows / size);
  for (int r = 0; r < rs_rows % size; ++r) ++blocks[r];
  std::vector<float> rs_in(rs_rows * 4), rs_out(blocks[me] * 4, -1);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(Value(me, 9, static_cast<int>(i)));
  Request rs = MakeRequest("one.reducescatter", OpType::kReducescatter, DataType::kFloat32, rs_in.data(),
                           rs_out.data(), {rs_rows, 4}, {blocks[me], 4});
  rs.meta.prescale = 2.0;
  f.exec->RunOne(std::move(rs), Response{});
  names.push_back("one.reducescatter");

  f.finishes.WaitFor(names);
  for (const auto& name : names) EXPECT(f.finishes.status[name].ok(), name + ": " + f.finishes.status[name].reason());
  for (size_t i = 0; i < big_out.size(); ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += Value(r, 7, static_cast<int>(i)) * 0.5;
    want /= size;
    EXPECT(std::fabs(big_out[i] - want) <= 1e-5 * std::fabs(want) + 1e-6, "scaled direct sum");
  }
  for (int i = 0; i < kOdd; ++i) {
    double want = 0, want16 = 0;
    for (int r = 0; r < size; ++r) {
      want += Value(r, 11, i) * 1.5;
      want16 += (i % 7 + r) * 1.5;
    }
    if (std::fabs(f64_odd_out[i] - want) > 1e-12 * std::fabs(want) + 1e-12 ||
        std::fabs(f64_odd_inplace[i] - want) > 1e-12 * std::fabs(want) + 1e-12 ||
        HalfToFloat(f16_odd_out[i]) != static_cast<float>(want16)) {
      EXPECT(false, "scaled direct sum of 200,003 elements, element " + std::to_string(i) + ": float64 out " +
                        std::to_string(f64_odd_out[i]) + ", in place " + std::to_string(f64_odd_inplace[i]) +
                        ", float16 " + std::to_string(HalfToFloat(f16_odd_out[i])) + ", want " +
                        std::to_string(want) + " / " + std::to_string(want16));
      break;
    }
  }
  for (int i = 0; i < 9; ++i) EXPECT(ints_out[i] == (10 - i) * 2, "int32 min with postscale");
  int row = 0;
  for (int r = 0; r < size; ++r) {
    for (int k = 0; k < (r + 1) * 3; ++k) EXPECT(ag_out[row * 3 + k] == static_cast<float>(r * 100 + k), "allgather");
    row += r + 1;
  }
  for (int i = 0; i < 11; ++i) EXPECT(bc_out[i] == (size - 1) * 1000 + i, "broadcast");
  int at = 0;
  for (int r = 0; r < size; ++r) {
    int start = 0;  // rows rank r sends to ranks before me
    for (int d = 0; d < me; ++d) start += (r + d) % 3;
    for (int k = 0; k < (r + me) % 3 * 2; ++k) EXPECT(a2a_out[at++] == r * 1000 + start * 2 + k, "alltoall");
  }
  int lo = 0;
  for (int r = 0; r < me; ++r) lo += blocks[r];
  for (int k = 0; k < blocks[me] * 4; ++k) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += 2.0 * Value(r, 9, lo * 4 + k);
    EXPECT(std::fabs(rs_out[k] - want) <= 1e-5 * std::fabs(want), "reducescatter");
  }
}

// Half-type allreduces with factors the half types cannot hold (Note
// [Pre-multiplied sums]): direct (alone, reduced where it lies) and fused
// (packed with another tensor), each must give the bits of the float32
// scaling: bfloat16 averaged as Core::Enqueue maps it (prescale 1/size; 1/3
// keeps 8 bits in bfloat16; each element non-zero on one rank only, so the
// sum is exact in any order), float16 times 2^17 (infinity in float16:
// zeros would become NaN) and times 2^-25 (0 in float16), both over inputs
// whose sums are exact. The lane stand-in pre-multiplies as NCCL does.
void CheckHalfScaleFactors(Fixture& f, int size) {
  struct Case {
    std::string name;
    DataType dtype;
    double prescale, postscale;
    std::function<float(int rank, int i)> value;
  };
  const std::vector<Case> cases = {
      {"bf16.average", DataType::kBFloat16, 1.0 / size, 1.0,
       [size](int r, int i) { return i % size == r ? static_cast<float>(i % 251 - 125) : 0.0f; }},
      {"f16.times.2^17", DataType::kFloat16, 1.0, 131072.0,
       [](int r, int i) { return i % 4 == 0 ? 0.0f : std::ldexp(static_cast<float>((i + r) % 3), -17); }},
      {"f16.times.2^-25", DataType::kFloat16, 1.0, std::ldexp(1.0, -25),
       [](int r, int i) { return i % 4 == 0 ? 0.0f : 512.0f * static_cast<float>((i + r) % 3 + 1); }},
  };
  const int n = 4099;
  auto to_type = [](DataType d, float v) { return d == DataType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v); };
  auto from_type = [](DataType d, uint16_t v) { return d == DataType::kFloat16 ? HalfToFloat(v) : BFloat16ToFloat(v); };
  std::vector<std::vector<uint16_t>> in(cases.size()), direct(cases.size()), fused(cases.size());
  std::vector<uint16_t> filler_in(5, 0), filler_out(5 * cases.size());
  std::vector<std::string> names;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    in[c].resize(n);
    direct[c].assign(n, 0x7fff);
    fused[c].assign(n, 0x7fff);
    for (int i = 0; i < n; ++i) in[c][i] = to_type(k.dtype, k.value(g_rank, i));
    Request one = MakeRequest(k.name + ".direct", OpType::kAllreduce, k.dtype, in[c].data(), direct[c].data(), {n},
                              {n});
    one.meta.prescale = k.prescale;
    one.meta.postscale = k.postscale;
    f.exec->RunOne(std::move(one), Response{});
    std::vector<Request> group;
    group.push_back(MakeRequest(k.name + ".fused", OpType::kAllreduce, k.dtype, in[c].data(), fused[c].data(), {n},
                                {n}));
    group.push_back(MakeRequest(k.name + ".filler", OpType::kAllreduce, k.dtype, filler_in.data(),
                                filler_out.data() + 5 * c, {5}, {5}));
    for (Request& r : group) {
      r.meta.prescale = k.prescale;
      r.meta.postscale = k.postscale;
    }
    f.exec->RunFused(std::move(group));
    for (const char* kind : {".direct", ".fused", ".filler"}) names.push_back(k.name + kind);
  }
  f.finishes.WaitFor(names);
  for (const auto& name : names) EXPECT(f.finishes.status[name].ok(), name + ": " + f.finishes.status[name].reason());
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    for (int i = 0; i < n; ++i) {
      float sum = 0;  // of the prescaled values in the type, exact
      for (int r = 0; r < size; ++r) {
        sum += from_type(k.dtype, to_type(k.dtype, k.value(r, i) * static_cast<float>(k.prescale)));
      }
      const uint16_t want = to_type(k.dtype, sum * static_cast<float>(k.postscale));
      if (direct[c][i] != want || fused[c][i] != want) {
        EXPECT(false, k.name + " element " + std::to_string(i) + ": direct " +
                          std::to_string(from_type(k.dtype, direct[c][i])) + ", fused " +
                          std::to_string(from_type(k.dtype, fused[c][i])) + ", want " +
                          std::to_string(from_type(k.dtype, want)) + " (sum " + std::to_string(sum) + ")");
      }
    }
  }
}

// Every lane saw the same calls, in the same order, on every rank.
void CheckLanesAgree(Communicator* world, Fixture& f) {
  for (size_t i = 0; i < f.lanes.size(); ++i) {
    uint64_t mine = f.lanes[i]->hash();
    std::vector<uint64_t> all(world->size());
    std::vector<int64_t> counts(world->size(), 1), displs(world->size());
    for (int r = 0; r < world->size(); ++r) displs[r] = r;
    EXPECT(world->Allgatherv(&mine, 1, all.data(), counts, displs, DataType::kInt64).ok(), "hash exchange");
    for (uint64_t h : all) EXPECT(h == mine, "lane " + std::to_string(i) + " ran different calls on different ranks");
  }
}

}  // namespace

int main() {
  MpiWorld mpi(true);
  World* world = &mpi;
  Group everyone;  // for the tests' own exchanges
  EXPECT(world->CreateGroup(world->control().global_ranks(), &everyone).ok(), "world group");
  g_rank = world->topology().rank;
  const int size = world->topology().size;

  {  // healthy runs: three lanes, stream-ordered buffers
    Fixture f(world, 3, true);
    CheckFusedAllreduce(f, size, "a");
    CheckCollectives(f, size);
    CheckHalfScaleFactors(f, size);
    CheckFusedAllreduce(f, size, "b");  // buffers reused
    f.exec->Drain();
    EXPECT(f.finishes.fatal.empty(), "a healthy run called the fatal callback");
    EXPECT(f.lanes.size() == 3, "lanes: " + std::to_string(f.lanes.size()));
    CheckLanesAgree(everyone.data.get(), f);
    f.exec.reset();
    EXPECT(f.runtime.events_made == f.runtime.events_freed, "events leaked");
    EXPECT(f.runtime.buffers_made == f.runtime.buffers_freed, "buffers leaked");
  }
  {  // one lane, no memory pools: outgrown buffers are kept until the end
    Fixture f(world, 1, false);
    CheckFusedAllreduce(f, size, "c");
    std::vector<float> large(600000, 1.0f), small(10, 1.0f);
    std::vector<Request> group;
    group.push_back(MakeRequest("grow.large", OpType::kAllreduce, DataType::kFloat32, large.data(), large.data(),
                                {600000}, {600000}));
    group.push_back(MakeRequest("grow.small", OpType::kAllreduce, DataType::kFloat32, small.data(), small.data(),
                                {10}, {10}));
    f.exec->RunFused(std::move(group));
    f.finishes.WaitFor({"grow.large", "grow.small"});
    f.exec->Drain();
    EXPECT(f.finishes.status["grow.large"].ok() && large[12345] == static_cast<float>(size), "grown fusion buffer");
    f.exec.reset();
    EXPECT(f.runtime.buffers_made == f.runtime.buffers_freed, "buffers leaked without memory pools");
  }
  {  // a failure after the lane is picked (here: on every rank) is fatal:
     // the requests fail with the cause, the Core is asked to stop once,
     // later ops fail at once
    Fixture f(world, 2, true);
    std::vector<float> a(8, 1.0f), b(8, 1.0f), c(8, 1.0f);
    std::vector<Request> group;
    group.push_back(MakeRequest("bad.0", OpType::kAllreduce, DataType::kFloat32, a.data(), a.data(), {8}, {8}));
    group.push_back(MakeRequest("bad.1", OpType::kAllreduce, DataType::kFloat32, b.data(), b.data(), {8}, {8}));
    group[1].ready_event = std::shared_ptr<void>(kPoisonedEvent, [](void*) {});
    f.exec->RunFused(std::move(group));
    f.exec->RunOne(MakeRequest("after", OpType::kAllreduce, DataType::kFloat32, c.data(), c.data(), {8}, {8}),
                   Response{});
    f.finishes.WaitFor({"bad.0", "bad.1", "after"});
    for (const char* name : {"bad.0", "bad.1"}) {
      EXPECT(f.finishes.status[name].reason().find("poisoned ready event") != std::string::npos,
             std::string(name) + ": " + f.finishes.status[name].reason());
    }
    EXPECT(f.finishes.status["after"].code() == StatusCode::kAborted &&
               f.finishes.status["after"].reason().find("GPU collectives failed") != std::string::npos,
           "after: " + f.finishes.status["after"].reason());
    EXPECT(c[0] == 1.0f, "an op after the failure ran");
    EXPECT(f.finishes.fatal.size() == 1, "fatal called " + std::to_string(f.finishes.fatal.size()) + " times");
    EXPECT(f.finishes.fatal[0].reason().find("poisoned ready event") != std::string::npos, "fatal's cause");
    for (HostComm* lane : f.lanes) EXPECT(!lane->AsyncError().ok(), "a lane was not aborted");
  }
  g_aborted = false;
  {  // a tensor on another GPU than the lanes' (Core::Check refuses it at
     // enqueue; this is the backstop) is fatal, naming it and the rank: the
     // peers would wait on the next lane for a call this rank never makes
    Fixture f(world, 2, true);
    std::vector<float> a(8, 1.0f), b(8, 1.0f), c(8, 1.0f);
    f.exec->RunOne(MakeRequest("first", OpType::kAllreduce, DataType::kFloat32, a.data(), a.data(), {8}, {8}),
                   Response{});
    f.finishes.WaitFor({"first"});
    Request other = MakeRequest("elsewhere", OpType::kAllreduce, DataType::kFloat32, b.data(), b.data(), {8}, {8});
    other.meta.device = other.input.device = other.output.device = 1;
    f.exec->RunOne(std::move(other), Response{});
    f.exec->RunOne(MakeRequest("later", OpType::kAllreduce, DataType::kFloat32, c.data(), c.data(), {8}, {8}),
                   Response{});
    f.finishes.WaitFor({"elsewhere", "later"});
    const std::string why = f.finishes.status["elsewhere"].reason();
    EXPECT(why.find("'elsewhere' on rank " + std::to_string(g_rank)) != std::string::npos &&
               why.find("gpu(1)") != std::string::npos && why.find("gpu(0)") != std::string::npos,
           "elsewhere: " + why);
    EXPECT(f.finishes.fatal.size() == 1, "a wrong device was not fatal: fatal called " +
                                             std::to_string(f.finishes.fatal.size()) + " times");
    EXPECT(f.finishes.status["later"].reason().find("GPU collectives failed") != std::string::npos && c[0] == 1.0f,
           "later: " + f.finishes.status["later"].reason());
  }
  g_aborted = false;
  if (size > 1) {  // (one rank packs nothing: Note [One rank needs no collective])
    {  // growing fusion buffers without memory pools: kept until the end,
       // but grown by doubling, so what is held stays under 4x the largest need
      Fixture f(world, 1, false);
      int64_t largest = 0;
      for (int k = 0; k < 16; ++k) {
        const int n = 300000 + 40000 * k;
        std::vector<float> x(n, 1.0f), y(10, 1.0f);
        std::vector<Request> group;
        group.push_back(MakeRequest("grow.x." + std::to_string(k), OpType::kAllreduce, DataType::kFloat32, x.data(),
                                    x.data(), {n}, {n}));
        group.push_back(MakeRequest("grow.y." + std::to_string(k), OpType::kAllreduce, DataType::kFloat32, y.data(),
                                    y.data(), {10}, {10}));
        largest = std::max<int64_t>(largest, AlignFusionOffset(int64_t{n} * 4) + 40);
        f.exec->RunFused(std::move(group));
        f.finishes.WaitFor({"grow.x." + std::to_string(k), "grow.y." + std::to_string(k)});
        EXPECT(x[n - 1] == static_cast<float>(size) && y[9] == static_cast<float>(size), "growing fused sums");
      }
      f.exec->Drain();
      EXPECT(f.runtime.bytes_peak < 4 * largest,
             "fusion buffers grown 16 times held " + std::to_string(f.runtime.bytes_peak) + " bytes at most, for a " +
                 "largest need of " + std::to_string(largest) + " (" + std::to_string(f.runtime.buffers_made.load()) +
                 " buffers)");
      f.exec.reset();
      EXPECT(f.runtime.buffers_made == f.runtime.buffers_freed, "buffers leaked");
    }
    {  // a failed free while growing the buffer is fatal, with its cause
      Fixture f(world, 1, true);
      std::vector<float> a(1000, 1.0f), b(1000, 1.0f), c(600000, 1.0f), d(1000, 1.0f);
      std::vector<Request> group;
      group.push_back(
          MakeRequest("free.a", OpType::kAllreduce, DataType::kFloat32, a.data(), a.data(), {1000}, {1000}));
      group.push_back(
          MakeRequest("free.b", OpType::kAllreduce, DataType::kFloat32, b.data(), b.data(), {1000}, {1000}));
      f.exec->RunFused(std::move(group));
      f.finishes.WaitFor({"free.a", "free.b"});
      f.runtime.FailNextFree();
      group.clear();
      group.push_back(MakeRequest("free.c", OpType::kAllreduce, DataType::kFloat32, c.data(), c.data(), {600000},
                                  {600000}));
      group.push_back(
          MakeRequest("free.d", OpType::kAllreduce, DataType::kFloat32, d.data(), d.data(), {1000}, {1000}));
      f.exec->RunFused(std::move(group));
      f.finishes.WaitFor({"free.c", "free.d"});
      EXPECT(f.finishes.status["free.c"].reason().find("free failed") != std::string::npos,
             "free.c: " + f.finishes.status["free.c"].reason());
      EXPECT(f.finishes.fatal.size() == 1, "a failed free was not fatal");
    }
    g_aborted = false;
  }
  {  // work that never completes is aborted after the peer timeout and fails
    Fixture f(world, 2, true, /*peer_timeout=*/1.0);
    std::vector<float> a(8, 1.0f);
    f.runtime.StickNextEvent();
    const auto t0 = Clock::now();
    f.exec->RunOne(MakeRequest("stuck", OpType::kAllreduce, DataType::kFloat32, a.data(), a.data(), {8}, {8}),
                   Response{});
    f.finishes.WaitFor({"stuck"});
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT(f.finishes.status["stuck"].reason().find("ran for more than 1 s") != std::string::npos,
           "stuck: " + f.finishes.status["stuck"].reason());
    EXPECT(waited >= 1.0 && waited < 10.0, "stuck op failed after " + std::to_string(waited) + " s");
    EXPECT(f.finishes.fatal.size() == 1, "fatal not called for stuck work");
  }
  std::printf("PASS %d\n", g_rank);
  std::fflush(stdout);
  return 0;
}
