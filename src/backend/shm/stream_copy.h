// Copies into memory that will not be read again soon (an allreduce's
// output) with non-temporal stores where the CPU has them (SSE2), so the
// destination's lines are not first read into the cache. Memory bandwidth
// bounds the shared-memory allreduce (a 102 MB buffer is a few passes over
// DRAM), and each ordinary store to a line not in cache costs a read too.
// A transfer of fewer than kStreamMinBytes in all (`transfer_bytes`: the
// whole collective's, of which this copy may be one tensor's part) copies
// with ordinary stores: its destination is likely in cache already (a small
// collective's output, used call after call), and a streamed store only
// evicts it (one thread, a slot copied in then out, the destination reused:
// 4 KB 0.21 against 0.65 us streamed, 64 KB 2.3 against 3.9 us). Streamed
// stores pay where the destination is cold, as a large allreduce's is, small
// tensors of its fused buffer included, and from about 16 MB even where it
// is warm.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mxplugin {
namespace shm {

constexpr size_t kStreamMinBytes = 256 << 10;

inline void StreamCopy(void* dst, const void* src, size_t bytes, size_t transfer_bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
  if (transfer_bytes < kStreamMinBytes || bytes < 256 || head > bytes) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + body, s + body, bytes - body);
  _mm_sfence();  // streamed stores are weakly ordered: make them visible before returning
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace shm
}  // namespace mxplugin
