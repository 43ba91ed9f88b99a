// Several buffers seen as one byte range, laid end to end: the shared-memory
// allreduce walks its pieces across buffer boundaries, so a batch of tensors
// costs the barriers of one buffer of their total size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/communicator.h"
#include "backend/shm/stream_copy.h"
#include "common/scale.h"
#include "common/types.h"

namespace mxplugin {
namespace shm {

class BufferList {
 public:
  BufferList(const std::vector<Communicator::Buffer>& buffers, DataType dtype)
      : dtype_(dtype), element_bytes_(static_cast<int64_t>(DataTypeSize(dtype))) {
    starts_.push_back(0);
    for (const auto& b : buffers) {
      if (b.count <= 0) continue;
      buffers_.push_back(b);
      starts_.push_back(starts_.back() + b.count * element_bytes_);
    }
  }

  int64_t bytes() const { return starts_.back(); }

  // Copies inputs [offset, offset + n) to dst, times each buffer's
  // prescale. (offset and n are whole elements.)
  void Gather(char* dst, int64_t offset, int64_t n) const {
    ForEachPart(offset, n, [&](const Communicator::Buffer& b, int64_t within, int64_t len, int64_t at) {
      const char* src = static_cast<const char*>(b.send) + within;
      if (b.prescale == 1.0) {
        std::memcpy(dst + at, src, static_cast<size_t>(len));
      } else {
        CopyAndScale(dst + at, src, len / element_bytes_, dtype_, b.prescale);
      }
    });
  }

  // Copies src to outputs [offset, offset + n), times each buffer's
  // postscale: with non-temporal stores when there is nothing to scale.
  // (offset and n are whole elements.)
  void Scatter(int64_t offset, const char* src, int64_t n) const {
    ForEachPart(offset, n, [&](const Communicator::Buffer& b, int64_t within, int64_t len, int64_t at) {
      char* dst = static_cast<char*>(b.recv) + within;
      if (b.postscale == 1.0) {
        StreamCopy(dst, src + at, static_cast<size_t>(len), static_cast<size_t>(bytes()));
      } else {
        CopyAndScale(dst, src + at, len / element_bytes_, dtype_, b.postscale);
      }
    });
  }

  // The inputs at [offset, offset + n) if they lie in one buffer with
  // nothing to prescale, else null (Gather them).
  const char* ContiguousInput(int64_t offset, int64_t n) const {
    const size_t i = Find(offset);
    if (offset + n > starts_[i + 1] || buffers_[i].prescale != 1.0) return nullptr;
    return static_cast<const char*>(buffers_[i].send) + (offset - starts_[i]);
  }

 private:
  // The buffer holding byte `offset` (< bytes()).
  size_t Find(int64_t offset) const {
    return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  }

  // f(buffer, offset within it, length, offset within [offset, offset + n)).
  template <typename F>
  void ForEachPart(int64_t offset, int64_t n, F f) const {
    int64_t at = 0;
    for (size_t i = n > 0 ? Find(offset) : buffers_.size(); at < n; ++i) {
      const int64_t within = offset + at - starts_[i];
      const int64_t len = std::min(n - at, starts_[i + 1] - starts_[i] - within);
      f(buffers_[i], within, len, at);
      at += len;
    }
  }

  DataType dtype_;
  int64_t element_bytes_;
  std::vector<Communicator::Buffer> buffers_;  // the non-empty ones
  std::vector<int64_t> starts_;                 // byte offset of each, then the total
};

}  // namespace shm
}  // namespace mxplugin
