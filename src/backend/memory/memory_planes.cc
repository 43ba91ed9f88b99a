#include "backend/memory/memory_planes.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/reduce.h"

namespace mxplugin {
namespace memory {
namespace {

// Members' blocks at `offset` (elements) reduced in member order into `out`.
void ReduceBlocks(const std::vector<const void*>& all, int64_t offset, int64_t count, DataType dtype, ReduceOp op,
                  std::vector<char>* out) {
  const size_t esize = DataTypeSize(dtype);
  out->resize(static_cast<size_t>(count) * esize);
  if (count == 0) return;
  std::memcpy(out->data(), static_cast<const char*>(all[0]) + offset * esize, out->size());
  for (size_t r = 1; r < all.size(); ++r) {
    ReduceInto(out->data(), static_cast<const char*>(all[r]) + offset * esize, count, dtype, op);
  }
}

constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

}  // namespace

Status MemoryCommunicator::Meet(const void* mine, const std::function<void(const std::vector<const void*>&)>& read,
                                const char* what) {
  return m_.rendezvous->Meet(m_.me, mine, read, kNoDeadline, /*fail_if_peer_dead=*/true, what);
}

Status MemoryCommunicator::Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) {
  std::vector<char> result;
  Status st = Meet(send, [&](const std::vector<const void*>& all) { ReduceBlocks(all, 0, count, dtype, op, &result); },
                   "allreduce");
  if (st.ok() && !result.empty()) std::memcpy(recv, result.data(), result.size());
  if (st.ok() && m_.me == 0) ++m_.counts->reductions;
  return st;
}

Status MemoryCommunicator::AllreduceMany(const std::vector<Buffer>& given, DataType dtype, ReduceOp op) {
  const std::vector<Buffer> buffers = PrescaledIntoRecv(given, dtype);  // peers read this vector
  std::vector<std::vector<char>> results(buffers.size());
  bool same_batch = true;
  Status st = Meet(&buffers, [&](const std::vector<const void*>& all) {
    std::vector<const std::vector<Buffer>*> batches;
    for (const void* p : all) {
      batches.push_back(static_cast<const std::vector<Buffer>*>(p));
      same_batch = same_batch && batches.back()->size() == buffers.size();
    }
    if (!same_batch) return;
    for (size_t b = 0; b < buffers.size(); ++b) {
      std::vector<const void*> sends;
      for (const auto* batch : batches) sends.push_back((*batch)[b].send);
      ReduceBlocks(sends, 0, buffers[b].count, dtype, op, &results[b]);
    }
  }, "allreduce (batch)");
  if (!st.ok()) return st;
  if (!same_batch) return Status::Internal("allreduce (batch): members hold batches of different lengths");
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (!results[b].empty()) std::memcpy(buffers[b].recv, results[b].data(), results[b].size());
    ScaleInPlace(buffers[b].recv, buffers[b].count, dtype, buffers[b].postscale);
  }
  if (m_.me == 0) ++m_.counts->reductions;
  return st;
}

Status MemoryCommunicator::Allgatherv(const void* send, int64_t send_count, void* recv,
                                      const std::vector<int64_t>& counts, const std::vector<int64_t>& displs,
                                      DataType dtype) {
  if (send_count != counts[m_.me]) return Status::Internal("allgather: my count disagrees with the counts");
  const size_t esize = DataTypeSize(dtype);
  std::vector<std::vector<char>> blocks(counts.size());
  Status st = Meet(send, [&](const std::vector<const void*>& all) {
    for (size_t r = 0; r < all.size(); ++r) {
      const char* from = static_cast<const char*>(all[r]);
      blocks[r].assign(from, from + counts[r] * esize);
    }
  }, "allgather");
  if (!st.ok()) return st;
  for (size_t r = 0; r < blocks.size(); ++r) {
    if (!blocks[r].empty()) std::memcpy(static_cast<char*>(recv) + displs[r] * esize, blocks[r].data(), blocks[r].size());
  }
  return Status::Ok();
}

Status MemoryCommunicator::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  std::vector<char> result;
  Status st = Meet(buffer, [&](const std::vector<const void*>& all) {
    if (m_.me == root) return;
    const char* from = static_cast<const char*>(all[root]);
    result.assign(from, from + count * DataTypeSize(dtype));
  }, "broadcast");
  if (st.ok() && !result.empty()) std::memcpy(buffer, result.data(), result.size());
  return st;
}

namespace {
struct AlltoallPost {
  const void* send;
  const std::vector<int64_t>* counts;
  const std::vector<int64_t>* displs;
};
}  // namespace

Status MemoryCommunicator::Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& send_displs, void* recv,
                                     const std::vector<int64_t>& recv_counts,
                                     const std::vector<int64_t>& recv_displs, DataType dtype) {
  const size_t esize = DataTypeSize(dtype);
  AlltoallPost mine{send, &send_counts, &send_displs};
  std::vector<std::vector<char>> blocks(recv_counts.size());
  bool counts_agree = true;
  Status st = Meet(&mine, [&](const std::vector<const void*>& all) {
    for (size_t r = 0; r < all.size(); ++r) {
      const auto* post = static_cast<const AlltoallPost*>(all[r]);
      const int64_t n = (*post->counts)[m_.me];
      counts_agree = counts_agree && n == recv_counts[r];
      const char* from = static_cast<const char*>(post->send) + (*post->displs)[m_.me] * esize;
      blocks[r].assign(from, from + n * esize);
    }
  }, "alltoall");
  if (!st.ok()) return st;
  if (!counts_agree) return Status::Internal("alltoall: send and receive counts disagree");
  for (size_t r = 0; r < blocks.size(); ++r) {
    if (!blocks[r].empty()) std::memcpy(static_cast<char*>(recv) + recv_displs[r] * esize, blocks[r].data(), blocks[r].size());
  }
  return Status::Ok();
}

Status MemoryCommunicator::ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                                         DataType dtype, ReduceOp op) {
  const int64_t offset = std::accumulate(recv_counts.begin(), recv_counts.begin() + m_.me, int64_t{0});
  std::vector<char> result;
  Status st = Meet(send, [&](const std::vector<const void*>& all) {
    ReduceBlocks(all, offset, recv_counts[m_.me], dtype, op, &result);
  }, "reducescatter");
  if (st.ok() && !result.empty()) std::memcpy(recv, result.data(), result.size());
  return st;
}

Status MemoryControlPlane::AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) {
  std::vector<uint64_t> result(*bits);
  bool same_length = true;
  Status st = m_.rendezvous->Meet(m_.me, bits, [&](const std::vector<const void*>& all) {
    for (const void* p : all) {
      const auto& theirs = *static_cast<const std::vector<uint64_t>*>(p);
      same_length = same_length && theirs.size() == result.size();
      for (size_t i = 0; i < std::min(result.size(), theirs.size()); ++i) result[i] &= theirs[i];
    }
  }, deadline, false, "negotiation (bit allreduce)");
  if (!st.ok()) return st;
  if (!same_length) return Status::Internal("negotiation (bit allreduce): ranks sent different lengths");
  if (m_.me == 0) ++m_.counts->bit_allreduces;
  *bits = std::move(result);
  return Status::Ok();
}

Status MemoryControlPlane::GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                                       Clock::time_point deadline) {
  std::vector<std::string> all_bytes;
  Status st = m_.rendezvous->Meet(m_.me, &mine, [&](const std::vector<const void*>& all) {
    if (m_.me != 0) return;
    for (const void* p : all) all_bytes.push_back(*static_cast<const std::string*>(p));
  }, deadline, false, "negotiation (gather requests)");
  if (st.ok() && m_.me == 0) {
    *gathered = std::move(all_bytes);
    ++m_.counts->gathers;
  }
  return st;
}

Status MemoryControlPlane::BroadcastBytes(std::string* bytes, Clock::time_point deadline) {
  std::string root_bytes;
  Status st = m_.rendezvous->Meet(m_.me, bytes, [&](const std::vector<const void*>& all) {
    if (m_.me != 0) root_bytes = *static_cast<const std::string*>(all[0]);
  }, deadline, false, "negotiation (broadcast responses)");
  if (st.ok() && m_.me != 0) *bytes = std::move(root_bytes);
  return st;
}

Status MemoryControlPlane::Barrier(Clock::time_point deadline) {
  return m_.rendezvous->Meet(m_.me, nullptr, [](const std::vector<const void*>&) {}, deadline, false, "barrier");
}

}  // namespace memory
}  // namespace mxplugin
