// Host stand-ins for the GPU, shared by the native tests:
//   HostRuntime  streams run work at once; events report "pending" a few
//                times before "done" (so completion is really asynchronous);
//                a poisoned ready event (recorded on kPoisonedStream) makes
//                the lane's wait fail, and StickNextEvent() an event that
//                stays pending until some lane is aborted.
//   HostComm     one MPI communicator per lane, so an op on the wrong lane
//                pairs with the wrong peer op; every call is hashed per lane.
// Tensors are host memory with device 0. The asynchronous variant
// (HostRuntime(..., /*async=*/true) with AsyncHostComm) runs each stream's
// work on a thread of its own and its allreduces as nonblocking MPI that
// Abort() abandons, as NCCL kernels behave: a peer that never joins leaves
// the work pending, not the caller blocked.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <algorithm>
#include <functional>
#include <map>
#include <thread>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/gpu_communicator.h"
#include "backend/world.h"
#include "core/device_runtime.h"
#include "common/half.h"
#include "common/scale.h"

namespace mxplugin {
namespace host_gpu {

inline int g_rank = 0;
inline std::atomic<bool> g_aborted{false};  // some lane communicator was aborted

#define EXPECT(cond, what)                                                                      \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "rank %d: FAILED %s (%s:%d): %s\n", g_rank, #cond, __FILE__, __LINE__, \
                   std::string(what).c_str());                                                  \
      std::fflush(stderr);                                                                      \
      std::_Exit(1); /* any thread: no static destructors under running threads */              \
    }                                                                                           \
  } while (0)

inline void* const kPoisonedEvent = reinterpret_cast<void*>(0x1);
inline void* const kPoisonedStream = reinterpret_cast<void*>(0x2);

struct HostEvent {
  int pending;  // queries still answered "pending"
  bool stuck;   // pending until a lane is aborted (a kernel waiting for a dead peer)
  std::atomic<bool> reached{true};  // asynchronous streams: the stream's work before it has run
};

// A stream whose work runs in order on its own thread.
class HostStream {
 public:
  HostStream() : thread_([this] { Loop(); }) {}
  ~HostStream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

class HostRuntime : public gpu::DeviceRuntime {
 public:
  explicit HostRuntime(bool stream_ordered, bool async = false) : stream_ordered_(stream_ordered), async_(async) {}
  int DeviceCount(std::string*) override { return 1; }
  Status CheckPointer(const void* ptr, const std::string& role, int* owner) override {
    *owner = 0;
    return ptr != nullptr ? Status::Ok() : Status::InvalidArgument(role + " is a null pointer");
  }
  Status RecordReadyEvent(int, void* stream, std::shared_ptr<void>* event) override {
    if (stream == kPoisonedStream) *event = std::shared_ptr<void>(kPoisonedEvent, [](void*) {});
    return Status::Ok();
  }
  Status UseDevice(int) override { return Status::Ok(); }
  bool StreamOrderedAllocation(int) override { return stream_ordered_; }
  Status CreateStream(void** stream) override {
    *stream = async_ ? static_cast<void*>(new HostStream()) : static_cast<void*>(new int(0));
    return Status::Ok();
  }
  Status DestroyStream(void* stream) override {
    if (async_) {
      delete static_cast<HostStream*>(stream);
    } else {
      delete static_cast<int*>(stream);
    }
    return Status::Ok();
  }
  Status Synchronize(void*) override { return Status::Ok(); }
  Status WaitEvent(void*, void* event) override {
    if (event == kPoisonedEvent) return Status::Internal("poisoned ready event");
    return Status::Ok();
  }
  Status RecordEvent(void* stream, void** event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* e = new HostEvent{static_cast<int>(std::rand() % 4), stuck_next_};
    stuck_next_ = false;
    ++events_made;
    if (async_) {
      e->reached = false;
      static_cast<HostStream*>(stream)->Push([e] { e->reached = true; });
    }
    *event = e;
    return Status::Ok();
  }
  gpu::EventState QueryEvent(void* event, Status*) override {
    auto* e = static_cast<HostEvent*>(event);
    if (!e->reached) return gpu::EventState::kPending;
    if (e->stuck && !g_aborted) return gpu::EventState::kPending;
    if (e->pending > 0) {
      --e->pending;
      return gpu::EventState::kPending;
    }
    return gpu::EventState::kDone;
  }
  Status DestroyEvent(void* event) override {
    delete static_cast<HostEvent*>(event);
    ++events_freed;
    return Status::Ok();
  }
  Status Allocate(int64_t bytes, void*, bool stream_ordered, void** out) override {
    EXPECT(stream_ordered == stream_ordered_, "allocation mode");
    *out = std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64));
    ++buffers_made;
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[*out] = bytes;
    bytes_live += bytes;
    bytes_peak = std::max(bytes_peak, bytes_live);
    return Status::Ok();
  }
  Status Free(void* ptr, void*, bool) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_next_free_) {
      fail_next_free_ = false;
      return Status::Internal("the stand-in's free failed, as asked");
    }
    std::free(ptr);
    ++buffers_freed;
    bytes_live -= sizes_[ptr];
    sizes_.erase(ptr);
    return Status::Ok();
  }
  Status BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype, void* stream) override {
    std::vector<cuda::CopyDescriptor> batch(copies, copies + n);  // read during the call, as the real one does
    auto run = [batch, dtype] {
      for (const auto& c : batch) CopyAndScale(c.dst, c.src, c.count, dtype, c.scale);
    };
    if (async_) {
      static_cast<HostStream*>(stream)->Push(run);
    } else {
      run();
    }
    return Status::Ok();
  }
  void StickNextEvent() {
    std::lock_guard<std::mutex> lock(mutex_);
    stuck_next_ = true;
  }
  void FailNextFree() {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_next_free_ = true;
  }

  std::atomic<int> events_made{0}, events_freed{0}, buffers_made{0}, buffers_freed{0};
  int64_t bytes_live = 0, bytes_peak = 0;  // device memory held, now and at most (under mutex_)

 private:
  bool stream_ordered_;
  bool async_;
  std::mutex mutex_;
  bool stuck_next_ = false;
  bool fail_next_free_ = false;
  std::map<void*, int64_t> sizes_;
};

// A lane's data plane over MPI: a group of the bootstrap's members made by
// `world` (collective over the world; the tests' only process set is the world).
inline std::unique_ptr<Communicator> MpiLane(World* world, ControlPlane* bootstrap) {
  Group group;
  Status st = world->CreateGroup(bootstrap->global_ranks(), &group);
  EXPECT(st.ok() && group.data, "lane group: " + st.reason());
  return std::move(group.data);
}

class HostComm : public GpuCommunicator {
 public:
  HostComm(std::unique_ptr<Communicator> mpi, void* stream) : mpi_(std::move(mpi)), stream_(stream) {}
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::vector<int>& global_ranks() const override { return mpi_->global_ranks(); }
  void* stream() const override { return stream_; }
  bool ScaledSumSupported(DataType dtype) const override {
    return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 || dtype == DataType::kFloat32 ||
           dtype == DataType::kFloat64;
  }
  // As NCCL's: the factor in the element type (a bfloat16 1/3 is 0.33398, a
  // float16 2^17 infinity), each element times it rounded to the type.
  Status ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor) override {
    Note("scaled_sum", count);
    ++reductions;
    if (dtype == DataType::kFloat16) factor = HalfToFloat(FloatToHalf(static_cast<float>(factor)));
    if (dtype == DataType::kBFloat16) factor = BFloat16ToFloat(FloatToBFloat16(static_cast<float>(factor)));
    if (dtype == DataType::kFloat32) factor = static_cast<float>(factor);
    if (mpi_->size() == 1) {
      // As NCCL's one-rank pre-multiplied sum (oneRankReduce, measured on an
      // H100 with NCCL 2.28): min(32, ceil(bytes / 16 KiB)) blocks of
      // alignUp(count / blocks, 16 / element size) elements each, so when
      // count / blocks is already a multiple of the pack width the last
      // count % blocks elements are never written. The executor must not
      // call this at one rank (Note [One rank needs no collective]).
      const int64_t esz = static_cast<int64_t>(DataTypeSize(dtype));
      const int64_t blocks = std::min<int64_t>(32, (count * esz + (16 << 10) - 1) / (16 << 10));
      const int64_t pack = 16 / esz;
      const int64_t per_block = (count / blocks + pack - 1) / pack * pack;
      CopyAndScale(recv, send, std::min(count, blocks * per_block), dtype, factor);
      return Status::Ok();
    }
    CopyAndScale(recv, send, count, dtype, factor);
    return Guard([&] { return mpi_->Allreduce(recv, recv, count, dtype, ReduceOp::kSum); });
  }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override {
    Note("allreduce", count);
    ++reductions;
    return Guard([&] { return mpi_->Allreduce(send, recv, count, dtype, op); });
  }

  // Allreduce calls of either kind this lane made (the planner's fusion decides how many).
  std::atomic<int> reductions{0};
  Status Allgatherv(const void* send, int64_t send_count, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, DataType dtype) override {
    int64_t total = 0;  // the same on every rank, unlike send_count
    for (int64_t c : counts) total += c;
    Note("allgather", total);
    return Guard([&] { return mpi_->Allgatherv(send, send_count, recv, counts, displs, dtype); });
  }
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override {
    Note("broadcast", count);
    return Guard([&] { return mpi_->Broadcast(buffer, count, dtype, root); });
  }
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                   void* recv, const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   DataType dtype) override {
    Note("alltoall", 0);
    return Guard([&] {
      return mpi_->Alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
    });
  }
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override {
    Note("reducescatter", 0);
    return Guard([&] { return mpi_->ReduceScatter(send, recv, recv_counts, dtype, op); });
  }
  Status AsyncError() override { return aborted_ ? Status::Aborted("aborted") : Status::Ok(); }
  void Abort() override {
    aborted_ = true;
    g_aborted = true;
  }
  uint64_t hash() const { return hash_; }

 private:
  template <typename F>
  Status Guard(F call) {
    if (aborted_) return Status::Aborted("the lane was aborted");
    return call();
  }
  void Note(const std::string& what, int64_t count) {
    for (char c : what + std::to_string(count)) hash_ = hash_ * 1099511628211ull ^ static_cast<uint64_t>(c);
  }

  std::unique_ptr<Communicator> mpi_;
  void* stream_;
  std::atomic<bool> aborted_{false};
  uint64_t hash_ = 14695981039346656037ull;
};

// The asynchronous lane communicator: float32/float64 sums only, queued on
// the lane's HostStream as nonblocking MPI over a communicator of its own;
// Abort() makes a pending one be abandoned (its peers may never join).
class AsyncHostComm : public GpuCommunicator {
 public:
  AsyncHostComm(MPI_Comm comm, HostStream* stream) : comm_(comm), stream_(stream) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    for (int r = 0; r < size_; ++r) ranks_.push_back(r);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  void* stream() const override { return stream_; }
  bool ScaledSumSupported(DataType) const override { return false; }
  Status ScaledSum(const void*, void*, int64_t, DataType, double) override { return Status::Internal("no"); }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override {
    if (aborted_) return Status::Aborted("the lane was aborted");
    if (op != ReduceOp::kSum || (dtype != DataType::kFloat32 && dtype != DataType::kFloat64)) {
      return Status::Internal("the asynchronous stand-in sums float32/float64 only");
    }
    const MPI_Datatype type = dtype == DataType::kFloat32 ? MPI_FLOAT : MPI_DOUBLE;
    stream_->Push([this, send, recv, count, type] {
      MPI_Request req;
      MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), type, MPI_SUM, comm_, &req);
      int done = 0;
      while (!done && !aborted_) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    return Status::Ok();
  }
  Status Allgatherv(const void*, int64_t, void*, const std::vector<int64_t>&, const std::vector<int64_t>&,
                    DataType) override {
    return Status::Internal("no");
  }
  Status Broadcast(void*, int64_t, DataType, int) override { return Status::Internal("no"); }
  Status Alltoallv(const void*, const std::vector<int64_t>&, const std::vector<int64_t>&, void*,
                   const std::vector<int64_t>&, const std::vector<int64_t>&, DataType) override {
    return Status::Internal("no");
  }
  Status ReduceScatter(const void*, void*, const std::vector<int64_t>&, DataType, ReduceOp) override {
    return Status::Internal("no");
  }
  Status AsyncError() override { return aborted_ ? Status::Aborted("aborted") : Status::Ok(); }
  void Abort() override {
    aborted_ = true;
    g_aborted = true;
  }

 private:
  MPI_Comm comm_;  // left to MPI_Finalize: an abandoned operation may still use it
  HostStream* stream_;
  int rank_ = 0, size_ = 1;
  std::vector<int> ranks_;
  std::atomic<bool> aborted_{false};
};

}  // namespace host_gpu
}  // namespace mxplugin
