// A reusable, 64-byte aligned host buffer that small tensors are packed into so
// that one collective call moves them all.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace mxplugin {

class FusionBuffer {
 public:
  FusionBuffer() = default;
  ~FusionBuffer() { std::free(data_); }
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;

  // Returns at least `bytes` bytes; contents are not preserved on growth.
  char* Reserve(int64_t bytes);

 private:
  char* data_ = nullptr;
  int64_t capacity_ = 0;
};

// Offset of the next tensor in a fused buffer: 64-byte aligned so each
// tensor's scale loop starts on a cache line.
inline int64_t AlignFusionOffset(int64_t offset) { return (offset + 63) & ~int64_t{63}; }

}  // namespace mxplugin
