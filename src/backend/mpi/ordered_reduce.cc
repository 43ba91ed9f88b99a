// MpiCommunicator's reductions over three or more ranks, in rank order
// (Note [Fixed reduction order]).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "backend/mpi/mpi_communicator.h"
#include "common/reduce.h"

namespace mxplugin {
namespace {

// Elements are reduced in pieces of at most this many bytes per rank, so
// the scratch space is bounded whatever the buffer's size.
constexpr int64_t kOrderedPieceBytes = int64_t{4} << 20;
// A piece whose copies from every rank fit in this many bytes is gathered
// whole by every rank (one MPI call); larger ones are exchanged block by
// block (Note [Pairwise exchange]), then gathered (two calls, each rank receiving about the piece once).
constexpr int64_t kGatherWholeBytes = int64_t{64} << 10;
// The pairwise exchange's messages (the only point-to-point traffic on a
// data-plane communicator).
constexpr int kExchangeTag = 1;
// Note [Exchanges that watch their peers].
constexpr auto kPeerLookAfter = std::chrono::seconds(1);
constexpr double kPeerProbeSeconds = 0.3;
constexpr int kSpinsBeforeYield = 1000;

}  // namespace

// Note [Fixed reduction order]: floating-point addition is not associative,
// so a sum's bits depend on the order its terms meet in. Every reduction
// mxplugin runs on the CPU sums each element's terms in one order, rank 0
// first, then 1, 2, ...: within a host in local-rank order (the
// shared-memory allreduce and reduce-scatter, whoever owns the slice), then
// the hosts' sums in the order of their first rank (the cross communicators
// are split so, mpi_hierarchy.cc), and over flat MPI in rank order.
// MPI's own reductions do not promise that: the algorithm MPICH and Open
// MPI pick depends on the message's size (recursive doubling for short
// ones, reduce-scatter and allgather for long ones), and each pairs the
// ranks differently, so an element's bits would depend on what was fused
// with it. Two operands commute exactly (NaNs aside: which NaN, or whether
// min/max of a NaN and a number is the NaN, may depend on the operands'
// order), so over two ranks MPI's own call is kept; over three or more this
// file reduces itself, moving bytes with MPI and adding in rank order. The
// bits then depend only on the inputs, the dtype, the op, and the number
// and placement of the ranks. The reduce-scatter's block offsets are MPI
// ints: over three or more ranks its input is limited to 2^31 elements.
Status MpiCommunicator::OrderedAllreduce(const void* send, void* recv, int64_t count, DataType dtype,
                                         ReduceOp op) {
  const int n = size(), me = rank();
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t piece_elements = std::max<int64_t>(1, kOrderedPieceBytes / esize);
  const MPI_Datatype type = MpiType(dtype);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  std::vector<const void*> terms(static_cast<size_t>(n));
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  Status left = NotLeaving("MPI_Allgather");  // also for a call with nothing to move
  if (!left.ok()) return left;
  for (int64_t at = 0; at < count; at += piece_elements) {
    const int64_t m = std::min(piece_elements, count - at);
    const bool whole = m * esize * n <= kGatherWholeBytes;
    Status st = NotLeaving(whole ? "MPI_Allgather" : "MPI_Sendrecv");
    if (!st.ok()) return st;
    if (whole) {
      scratch_.resize(static_cast<size_t>(m * esize * n));
      st = Checked(MPI_Allgather(in + at * esize, static_cast<int>(m), type, scratch_.data(), static_cast<int>(m),
                                 type, comm_->get()),
                   "MPI_Allgather");
      if (!st.ok()) return st;
      for (int k = 0; k < n; ++k) terms[k] = scratch_.data() + k * m * esize;
      ReduceInRankOrder(out + at * esize, terms.data(), n, m, dtype, op);
      continue;
    }
    // Block k of the piece is reduced by rank k from every rank's copy of it.
    const int64_t per = (m + n - 1) / n;
    for (int k = 0; k < n; ++k) {
      const int64_t lo = std::min(m, k * per);
      counts[k] = static_cast<int>(std::min(m, lo + per) - lo);
      displs[k] = static_cast<int>(lo);
    }
    const int mine = counts[me];
    scratch_.resize(static_cast<size_t>(mine * esize * n));
    st = ExchangeBlocks(in + at * esize, counts, displs, mine, dtype, scratch_.data());
    if (!st.ok()) return st;
    for (int k = 0; k < n; ++k) terms[k] = scratch_.data() + static_cast<int64_t>(k) * mine * esize;
    ReduceInRankOrder(out + (at + displs[me]) * esize, terms.data(), n, mine, dtype, op);
    st = NotLeaving("MPI_Allgatherv");
    if (!st.ok()) return st;
    st = Checked(MPI_Allgatherv(MPI_IN_PLACE, 0, type, out + at * esize, counts.data(), displs.data(), type,
                                comm_->get()),
                 "MPI_Allgatherv");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// Note [Pairwise exchange]: the blocks go one peer at a time (step s: to
// rank me+s, from rank me-s, one MPI_Sendrecv), not by MPI_Alltoallv.
// MPICH's Alltoallv posts a send and a receive to every peer at once, and
// with a peer killed in the middle it can crash a survivor (SIGSEGV in
// libmpi over TCP; one exchange at a time does not: docs/reliability.md),
// and a survivor must live to hear that its world is broken and hand its
// state over.
Status MpiCommunicator::ExchangeBlocks(const char* send, const std::vector<int>& counts,
                                       const std::vector<int>& displs, int mine, DataType dtype, char* slots) {
  const int n = size(), me = rank();
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const MPI_Datatype type = MpiType(dtype);
  std::memcpy(slots + static_cast<int64_t>(me) * mine * esize, send + displs[me] * esize,
              static_cast<size_t>(counts[me] * esize));
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n, from = (me - s + n) % n;
    Status st = NotLeaving("MPI_Sendrecv");
    if (!st.ok()) return st;
    MPI_Request pair[2];
    int rc = MPI_Irecv(slots + static_cast<int64_t>(from) * mine * esize, mine, type, from, kExchangeTag,
                       comm_->get(), &pair[0]);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Isend(send + displs[to] * esize, counts[to], type, to, kExchangeTag, comm_->get(), &pair[1]);
    }
    st = rc == MPI_SUCCESS ? AwaitExchange(pair, {comm_->global_ranks()[to], comm_->global_ranks()[from]})
                           : Checked(rc, "MPI_Sendrecv");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// Note [Exchanges that watch their peers]: a peer on another host that
// ends mid-exchange leaves this rank's receive waiting for ever (MPI over
// TCP says nothing), and a rank stuck so stays silent until its world's
// end finds it, late or never when its agent went with MPICH's
// process groups. So the exchange is polled: once it has waited
// kPeerLookAfter, the two peers are probed every kPeerLookAfter (their
// probe port refusing: the process is gone), and an ended one fails the
// call at once, named, as a lost peer; a rank that is leaving stops polling.
Status MpiCommunicator::AwaitExchange(MPI_Request* pair, const std::vector<int>& peers) {
  const auto began = std::chrono::steady_clock::now();
  auto next_look = began + kPeerLookAfter;
  for (int spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Testall(2, pair, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return Checked(rc, "MPI_Sendrecv");
    if (leaving_ && leaving_->IsSet()) {
      return LeavingStatus("MPI_Sendrecv", true);
    }
    const auto now = std::chrono::steady_clock::now();
    if (peers_ && now >= next_look) {
      const Peers ended = peers_->Ended(peers, kPeerProbeSeconds);
      if (!ended.empty()) {
        return LostContact(EndedText(ended) + " (the process is gone: its probe port refuses) during MPI_Sendrecv");
      }
      next_look = now + kPeerLookAfter;
    }
    if (spins > kSpinsBeforeYield) std::this_thread::yield();
  }
}

// Block k (recv_counts[k] elements) is reduced by rank k, piece by piece.
Status MpiCommunicator::OrderedReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                                             DataType dtype, ReduceOp op) {
  const int n = size(), me = rank();
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t per = std::max<int64_t>(1, kOrderedPieceBytes / esize / n);
  std::vector<int64_t> starts(static_cast<size_t>(n) + 1, 0);
  for (int k = 0; k < n; ++k) starts[k + 1] = starts[k] + recv_counts[k];
  if (starts[n] > INT_MAX) {
    return Status::InvalidArgument("reducescatter: more than 2^31 elements in all is not supported");
  }
  const int64_t longest = *std::max_element(recv_counts.begin(), recv_counts.end());
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  std::vector<const void*> terms(static_cast<size_t>(n));
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  Status left = NotLeaving("MPI_Sendrecv");  // also for a call with nothing to move
  if (!left.ok()) return left;
  for (int64_t at = 0; at < longest; at += per) {
    for (int k = 0; k < n; ++k) {
      counts[k] = static_cast<int>(std::max<int64_t>(0, std::min(per, recv_counts[k] - at)));
      displs[k] = static_cast<int>(starts[k] + std::min(at, recv_counts[k]));
    }
    const int mine = counts[me];
    scratch_.resize(static_cast<size_t>(mine * esize * n));
    Status st = NotLeaving("MPI_Sendrecv");
    if (!st.ok()) return st;
    st = ExchangeBlocks(in, counts, displs, mine, dtype, scratch_.data());
    if (!st.ok()) return st;
    for (int k = 0; k < n; ++k) terms[k] = scratch_.data() + static_cast<int64_t>(k) * mine * esize;
    ReduceInRankOrder(out + at * esize, terms.data(), n, mine, dtype, op);
  }
  return Status::Ok();
}

}  // namespace mxplugin
