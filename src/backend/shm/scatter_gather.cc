// Reduce-scatter and allgather through the shared-memory segment, on one host.
#include <algorithm>
#include <cstring>

#include "backend/shm/hierarchical_communicator.h"
#include "backend/shm/stream_copy.h"
#include "common/reduce.h"

namespace mxplugin {
namespace shm {

// Note [Shared-memory reduce-scatter and allgather]: sharded optimizer
// states (mxplugin/training/sharding.py) replace each bucket's allreduce by a
// reduce-scatter and an allgather; over MPI each took longer here than the
// whole shared-memory allreduce. Through the segment, both walk the result
// blocks (block k: rank k's) in pieces, each piece behind one local barrier:
// - reduce-scatter: every rank copies piece p of every other rank's block
//   into its slot (one sub-slot per block, kPieceBytes / local_size each);
//   after the barrier, rank k reduces piece p of its own input block with
//   sub-slot k of every other rank's slot, straight into its output, in
//   local-rank order;
// - allgather: every rank copies piece p of its block into its slot; after
//   the barrier it copies every other rank's piece into its output.
// One barrier a piece is enough: piece p + 1 writes the other slot set, and
// p + 2 writes this one only after passing p + 1's barrier, which no rank
// reaches before it has read piece p (the allreduce's alternation, whose
// piece counter these share). Across hosts the flat communicator does both.

Status HierarchicalCommunicator::ReduceScatter(const void* send, void* recv,
                                               const std::vector<int64_t>& recv_counts, DataType dtype,
                                               ReduceOp op) {
  if (cross_) return flat_->ReduceScatter(send, recv, recv_counts, dtype, op);
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<int64_t> starts(local_size_ + 1, 0);  // each block's first element
  for (int k = 0; k < local_size_; ++k) starts[k + 1] = starts[k] + recv_counts[k];
  const int64_t longest = *std::max_element(recv_counts.begin(), recv_counts.end());
  // Elements of one block per piece, sub-slots 64-byte aligned.
  const int64_t per = std::max<int64_t>(1, (kPieceBytes / local_size_) / 64 * 64 / esize);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  for (int64_t at = 0; at < longest; at += per) {
    const int set = static_cast<int>(pieces_++ % 2);
    char* slot = Slot(set, local_rank_);
    auto piece = [&](int k) { return std::max<int64_t>(0, std::min(per, recv_counts[k] - at)); };
    for (int k = 0; k < local_size_; ++k) {
      if (k != local_rank_ && piece(k) > 0) {
        std::memcpy(slot + k * per * esize, in + (starts[k] + at) * esize, static_cast<size_t>(piece(k) * esize));
      }
    }
    Status st = LocalBarrier();
    if (!st.ok()) return st;
    const int64_t n = piece(local_rank_);
    if (n == 0) continue;
    // In local-rank order, as the allreduce (Note [Fixed reduction order]).
    terms_.resize(static_cast<size_t>(local_size_));
    for (int k = 0; k < local_size_; ++k) {
      terms_[k] = k == local_rank_ ? in + (starts[local_rank_] + at) * esize : Slot(set, k) + local_rank_ * per * esize;
    }
    ReduceInRankOrder(out + at * esize, terms_.data(), local_size_, n, dtype, op);
  }
  return Status::Ok();
}

Status HierarchicalCommunicator::Allgatherv(const void* send, int64_t send_count, void* recv,
                                            const std::vector<int64_t>& counts, const std::vector<int64_t>& displs,
                                            DataType dtype) {
  if (cross_) return flat_->Allgatherv(send, send_count, recv, counts, displs, dtype);
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  const int64_t per = std::max<int64_t>(1, kPieceBytes / esize);
  size_t gathered = 0;  // bytes of the whole output (StreamCopy's choice)
  for (int64_t c : counts) gathered += static_cast<size_t>(c * esize);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (send_count > 0 && in != out + displs[local_rank_] * esize) {
    std::memmove(out + displs[local_rank_] * esize, in, static_cast<size_t>(send_count * esize));
  }
  for (int64_t at = 0; at < longest; at += per) {
    const int set = static_cast<int>(pieces_++ % 2);
    auto piece = [&](int k) { return std::max<int64_t>(0, std::min(per, counts[k] - at)); };
    if (piece(local_rank_) > 0) {
      std::memcpy(Slot(set, local_rank_), in + at * esize, static_cast<size_t>(piece(local_rank_) * esize));
    }
    Status st = LocalBarrier();
    if (!st.ok()) return st;
    for (int k = 0; k < local_size_; ++k) {
      if (k != local_rank_ && piece(k) > 0) {
        StreamCopy(out + (displs[k] + at) * esize, Slot(set, k), static_cast<size_t>(piece(k) * esize), gathered);
      }
    }
  }
  return Status::Ok();
}

}  // namespace shm
}  // namespace mxplugin
