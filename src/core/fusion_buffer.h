// A reusable, 64-byte aligned host buffer that small tensors are packed into so
// that one collective call moves them all.
#pragma once

#include "common/codes.h"

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

// Offset of the next tensor in a fused buffer: MXP_FUSION_ALIGNMENT_BYTES
// (64) aligned, so each tensor's scale loop starts on a cache line and the
// GPU kernels take their 16-byte vector path.
inline int64_t AlignFusionOffset(int64_t offset) {
  constexpr int64_t kAlign = MXP_FUSION_ALIGNMENT_BYTES;
  static_assert((kAlign & (kAlign - 1)) == 0, "a power of two");
  return (offset + kAlign - 1) & ~(kAlign - 1);
}

}  // namespace mxplugin
