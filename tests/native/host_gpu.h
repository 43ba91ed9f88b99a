// Host stand-ins for the GPU, shared by the native tests:
//   HostRuntime  streams run work at once; events report "pending" a few
//                times before "done" (so completion is really asynchronous);
//                a poisoned ready event (recorded on kPoisonedStream) makes
//                the lane's wait fail, and StickNextEvent() an event that
//                stays pending until some lane is aborted.
//   HostComm     one MPI communicator per lane, so an op on the wrong lane
//                pairs with the wrong peer op; every call is hashed per lane.
// Tensors are host memory with device 0.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/gpu_communicator.h"
#include "core/device_runtime.h"
#include "scale.h"

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
};

class HostRuntime : public gpu::DeviceRuntime {
 public:
  explicit HostRuntime(bool stream_ordered) : stream_ordered_(stream_ordered) {}
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
    *stream = new int(0);
    return Status::Ok();
  }
  void DestroyStream(void* stream) override { delete static_cast<int*>(stream); }
  Status Synchronize(void*) override { return Status::Ok(); }
  Status WaitEvent(void*, void* event) override {
    if (event == kPoisonedEvent) return Status::Internal("poisoned ready event");
    return Status::Ok();
  }
  Status RecordEvent(void*, void** event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    *event = new HostEvent{static_cast<int>(std::rand() % 4), stuck_next_};
    stuck_next_ = false;
    ++events_made;
    return Status::Ok();
  }
  gpu::EventState QueryEvent(void* event, Status*) override {
    auto* e = static_cast<HostEvent*>(event);
    if (e->stuck && !g_aborted) return gpu::EventState::kPending;
    if (e->pending > 0) {
      --e->pending;
      return gpu::EventState::kPending;
    }
    return gpu::EventState::kDone;
  }
  void DestroyEvent(void* event) override {
    delete static_cast<HostEvent*>(event);
    ++events_freed;
  }
  Status Allocate(int64_t bytes, void*, bool stream_ordered, void** out) override {
    EXPECT(stream_ordered == stream_ordered_, "allocation mode");
    *out = std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64));
    ++buffers_made;
    return Status::Ok();
  }
  void Free(void* ptr, void*, bool) override {
    std::free(ptr);
    ++buffers_freed;
  }
  Status BatchedCopyAndScale(const cuda::CopyDescriptor* copies, int64_t n, DataType dtype, void*) override {
    for (int64_t i = 0; i < n; ++i) CopyAndScale(copies[i].dst, copies[i].src, copies[i].count, dtype, copies[i].scale);
    return Status::Ok();
  }
  void StickNextEvent() {
    std::lock_guard<std::mutex> lock(mutex_);
    stuck_next_ = true;
  }

  std::atomic<int> events_made{0}, events_freed{0}, buffers_made{0}, buffers_freed{0};

 private:
  bool stream_ordered_;
  std::mutex mutex_;
  bool stuck_next_ = false;
};

class HostComm : public GpuCommunicator {
 public:
  HostComm(std::unique_ptr<Communicator> mpi, void* stream) : mpi_(std::move(mpi)), stream_(stream) {}
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::vector<int>& global_ranks() const override { return mpi_->global_ranks(); }
  void* stream() const override { return stream_; }
  bool ScaledSumSupported(DataType dtype) const override {
    return dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
  }
  Status ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor) override {
    Note("scaled_sum", count);
    CopyAndScale(recv, send, count, dtype, factor);
    return Guard([&] { return mpi_->Allreduce(recv, recv, count, dtype, ReduceOp::kSum); });
  }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override {
    Note("allreduce", count);
    return Guard([&] { return mpi_->Allreduce(send, recv, count, dtype, op); });
  }
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
  Status Barrier() override { return Status::Internal("not offered"); }
  Status AllreduceBitwiseAnd(std::vector<uint64_t>*, Clock::time_point) override { return Status::Internal("no"); }
  Status GatherBytes(const std::string&, std::vector<std::string>*, Clock::time_point) override {
    return Status::Internal("no");
  }
  Status BroadcastBytes(std::string*, Clock::time_point) override { return Status::Internal("no"); }
  Status CreateSubgroup(const std::vector<int>&, std::unique_ptr<Communicator>*) override {
    return Status::Internal("no");
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

}  // namespace host_gpu
}  // namespace mxplugin
