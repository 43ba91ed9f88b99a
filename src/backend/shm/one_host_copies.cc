// Broadcast and alltoall through the shared-memory segment, on one host.
#include <algorithm>
#include <cstring>

#include "backend/shm/hierarchical_communicator.h"
#include "backend/shm/stream_copy.h"

namespace mxplugin {
namespace shm {

// Note [Shared-memory broadcast and alltoall]: over MPI, both cost a small
// call more than the whole segment round does (4 KB at 2 ranks: MPI_Bcast
// and MPI_Alltoallv from the core's thread, several microseconds; through
// the segment, one local barrier and a copy). Both walk their data in
// pieces, each behind one local barrier, alternating slot sets as the
// allreduce does (the reasoning of Note [Shared-memory reduce-scatter and
// allgather], whose piece counter these share):
// - broadcast: the root copies piece p into its slot; after the barrier,
//   every other rank copies it out. Every rank has the same count, so every
//   rank walks the same pieces.
// - alltoall: every rank copies piece p of each block it sends into its
//   slot, block k into sub-slot k; after the barrier, it copies sub-slot
//   `me` of every other rank's slot into its output. A rank knows only its
//   own counts, so the first piece also carries, ahead of the sub-slots,
//   the longest block each rank sends: after the first barrier every rank
//   knows the longest of all, hence how many pieces all of them walk.
// Its own block a rank copies straight from its input to its output.

namespace {

constexpr int64_t kAlltoallHeaderBytes = 64;  // the sender's longest block, ahead of the sub-slots

int64_t Clamp(int64_t per, int64_t count, int64_t at) { return std::max<int64_t>(0, std::min(per, count - at)); }

}  // namespace

Status HierarchicalCommunicator::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  if (cross_) return flat_->Broadcast(buffer, count, dtype, root);
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t per = std::max<int64_t>(1, kPieceBytes / esize);
  char* data = static_cast<char*>(buffer);
  for (int64_t at = 0; at < count; at += per) {
    const int set = static_cast<int>(pieces_++ % 2);
    const size_t bytes = static_cast<size_t>(Clamp(per, count, at) * esize);
    if (local_rank_ == root) std::memcpy(Slot(set, root), data + at * esize, bytes);
    Status st = LocalBarrier();
    if (!st.ok()) return st;
    if (local_rank_ != root) StreamCopy(data + at * esize, Slot(set, root), bytes, static_cast<size_t>(count * esize));
  }
  return Status::Ok();
}

Status HierarchicalCommunicator::Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                                           const std::vector<int64_t>& send_displs, void* recv,
                                           const std::vector<int64_t>& recv_counts,
                                           const std::vector<int64_t>& recv_displs, DataType dtype) {
  if (cross_) return flat_->Alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  // Elements of one block per piece, sub-slots 64-byte aligned.
  const int64_t per =
      std::max<int64_t>(1, ((kPieceBytes - kAlltoallHeaderBytes) / local_size_) / 64 * 64 / esize);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const int me = local_rank_;
  if (send_counts[me] > 0) {
    std::memcpy(out + recv_displs[me] * esize, in + send_displs[me] * esize,
                static_cast<size_t>(send_counts[me] * esize));
  }
  size_t received = 0;  // bytes this rank receives in all (StreamCopy's choice)
  for (int64_t c : recv_counts) received += static_cast<size_t>(c * esize);
  int64_t longest = 0;  // of every rank's blocks: known after the first piece
  for (int64_t at = 0; at == 0 || at < longest; at += per) {
    const int set = static_cast<int>(pieces_++ % 2);
    char* slot = Slot(set, me);
    if (at == 0) {
      const int64_t mine = *std::max_element(send_counts.begin(), send_counts.end());
      std::memcpy(slot, &mine, sizeof(mine));
    }
    for (int k = 0; k < local_size_; ++k) {
      const int64_t n = k == me ? 0 : Clamp(per, send_counts[k], at);
      if (n > 0) {
        std::memcpy(slot + kAlltoallHeaderBytes + k * per * esize, in + (send_displs[k] + at) * esize,
                    static_cast<size_t>(n * esize));
      }
    }
    Status st = LocalBarrier();
    if (!st.ok()) return st;
    if (at == 0) {
      for (int k = 0; k < local_size_; ++k) {
        int64_t theirs = 0;
        std::memcpy(&theirs, Slot(set, k), sizeof(theirs));
        longest = std::max(longest, theirs);
      }
    }
    for (int k = 0; k < local_size_; ++k) {
      const int64_t n = k == me ? 0 : Clamp(per, recv_counts[k], at);
      if (n > 0) {
        StreamCopy(out + (recv_displs[k] + at) * esize, Slot(set, k) + kAlltoallHeaderBytes + me * per * esize,
                   static_cast<size_t>(n * esize), received);
      }
    }
  }
  return Status::Ok();
}

}  // namespace shm
}  // namespace mxplugin
