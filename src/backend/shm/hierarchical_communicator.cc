#include "backend/shm/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/shm/buffer_list.h"
#include "common/reduce.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mxplugin {
namespace shm {
namespace {

constexpr int kSpinMicroseconds = 200;

inline void CpuRelax() {
#if defined(__SSE2__)
  _mm_pause();
#endif
}

}  // namespace

// Note [Hierarchical allreduce]: a buffer is reduced in pieces of up to
// kPieceBytes per rank, each cut into one slice per local rank (slices start
// at 64-byte boundaries). For each piece every local rank j (1) copies the
// slices the others reduce into its own slot of the segment (not slice j:
// no one else reads it); after a local barrier (2) it reduces slice j of its
// own input with slice j of every other slot, into slice j of its slot, and
// (3) allreduces that slice with the ranks of local rank j on the other
// hosts, so each byte crosses the network once per host, not once per rank;
// after a second barrier (4) it copies every slice out, times its buffer's
// postscale (an Average's 1/size among them: no pass of its own), with
// non-temporal stores when there is nothing to scale (stream_copy.h). Pieces
// are small enough that the segment's traffic stays in the shared cache, so
// DRAM sees about one read of the input and one write of the output per
// rank. Two slot sets alternate, so a rank may copy in the next piece while
// slower peers still copy out this one: the next piece's first barrier
// cannot pass until they are done, which is what the set after that needs.

size_t HierarchicalCommunicator::SegmentBytes(int local_size) {
  return kHeaderBytes + 2 * static_cast<size_t>(local_size) * kPieceBytes;
}

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat,
                                                   std::unique_ptr<Communicator> cross,
                                                   std::unique_ptr<Segment> segment, int local_rank, int local_size,
                                                   std::chrono::duration<double> timeout)
    : flat_(std::move(flat)),
      cross_(std::move(cross)),
      segment_(std::move(segment)),
      header_(reinterpret_cast<Header*>(segment_->data())),
      local_rank_(local_rank),
      local_size_(local_size),
      timeout_(timeout) {}

char* HierarchicalCommunicator::Slot(int set, int local_rank) const {
  return segment_->data() + kHeaderBytes + (static_cast<size_t>(set) * local_size_ + local_rank) * kPieceBytes;
}

Status HierarchicalCommunicator::LocalBarrier() {
  if (broken_) return Status::Aborted("the shared-memory allreduce failed earlier on this host");
  const uint32_t generation = header_->generation.load(std::memory_order_acquire);
  if (header_->arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<uint32_t>(local_size_ - 1)) {
    header_->arrived.store(0, std::memory_order_relaxed);
    header_->generation.fetch_add(1, std::memory_order_release);
    return FailedOnThisHost();
  }
  // Spin for a while (a peer is usually one piece's copy behind, tens of
  // microseconds), then yield the core: ranks here often share cores with
  // each other and with MXNet.
  const auto start = std::chrono::steady_clock::now();
  const auto spin_until = start + std::chrono::microseconds(kSpinMicroseconds);
  for (int spins = 0; header_->generation.load(std::memory_order_acquire) == generation; ++spins) {
    if ((spins & 63) != 0) {
      CpuRelax();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < spin_until) continue;
    std::this_thread::yield();
    if (now - start > timeout_) {
      broken_ = true;
      header_->failed.store(1, std::memory_order_release);
      return Status::Aborted("a rank on this host did not reach the shared-memory allreduce within " +
                             std::to_string(static_cast<int>(timeout_.count())) + " s");
    }
  }
  return FailedOnThisHost();
}

Status HierarchicalCommunicator::FailedOnThisHost() {
  if (header_->failed.load(std::memory_order_acquire) == 0) return Status::Ok();
  broken_ = true;
  return Status::Aborted("a rank on this host failed its part of the shared-memory allreduce (see its error)");
}

Status HierarchicalCommunicator::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                                           ReduceOp op) {
  return AllreduceMany({Buffer{send, recv, count}}, dtype, op);
}

// The buffers are one byte range to the pieces (buffer_list.h): a piece may
// end one buffer and start the next.
Status HierarchicalCommunicator::AllreduceMany(const std::vector<Buffer>& buffers, DataType dtype, ReduceOp op) {
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const BufferList list(buffers, dtype);
  const int64_t total = list.bytes();
  const int64_t align = std::max<int64_t>(64 / esize, 1);  // elements per 64 bytes
  auto slice = [&](int64_t elements, int j, int64_t* lo, int64_t* hi) {
    const int64_t per = ((elements + local_size_ - 1) / local_size_ + align - 1) / align * align;
    *lo = std::min(elements, j * per);
    *hi = std::min(elements, *lo + per);
  };
  for (int64_t offset = 0; offset < total; offset += kPieceBytes) {
    const int64_t elements = std::min(kPieceBytes, total - offset) / esize;
    const int set = static_cast<int>(pieces_++ % 2);
    char* slot = Slot(set, local_rank_);
    int64_t lo, hi;
    for (int k = 0; k < local_size_; ++k) {
      slice(elements, k, &lo, &hi);
      if (k != local_rank_ && hi > lo) list.Gather(slot + lo * esize, offset + lo * esize, (hi - lo) * esize);
    }
    Status st = LocalBarrier();
    if (!st.ok()) return st;
    slice(elements, local_rank_, &lo, &hi);
    char* mine = slot + lo * esize;
    // Every slice sums its inputs in local-rank order, whoever owns it (Note
    // [Fixed reduction order]): this rank's own input is read where it lies
    // unless the slice spans two buffers or is to be prescaled (the peers'
    // slices were prescaled as they were gathered into their slots).
    if (hi > lo) {
      const void* own = list.ContiguousInput(offset + lo * esize, (hi - lo) * esize);
      if (!own) {
        // Into `mine` where the first add reads it (local ranks 0 and 1);
        // a later rank's goes aside: the lower ranks' sum is written first.
        char* aside = mine;
        if (local_rank_ > 1) {
          own_slice_.resize(static_cast<size_t>((hi - lo) * esize));
          aside = own_slice_.data();
        }
        list.Gather(aside, offset + lo * esize, (hi - lo) * esize);
        own = aside;
      }
      terms_.resize(static_cast<size_t>(local_size_));
      for (int k = 0; k < local_size_; ++k) terms_[k] = k == local_rank_ ? own : Slot(set, k) + lo * esize;
      ReduceInRankOrder(mine, terms_.data(), local_size_, hi - lo, dtype, op);
    }
    // Every rank takes part in both barriers whatever happens, so that a
    // failure here does not leave local peers waiting.
    Status cross = (cross_ && hi > lo) ? cross_->Allreduce(mine, mine, hi - lo, dtype, op) : Status::Ok();
    if (!cross.ok()) header_->failed.store(1, std::memory_order_release);  // seen after the barrier
    st = LocalBarrier();
    if (!cross.ok()) return cross;
    if (!st.ok()) return st;
    for (int k = 0; k < local_size_; ++k) {
      slice(elements, k, &lo, &hi);
      if (hi > lo) list.Scatter(offset + lo * esize, Slot(set, k) + lo * esize, (hi - lo) * esize);
    }
  }
  return Status::Ok();
}

}  // namespace shm
}  // namespace mxplugin
