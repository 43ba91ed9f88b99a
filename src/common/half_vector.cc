#include "common/half_vector.h"

#include "common/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MXP_HAVE_X86 1
#endif

namespace mxplugin {
namespace {

#ifdef MXP_HAVE_X86
__attribute__((target("avx,f16c"))) void HalfToFloatF16C(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16C(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);  // round to nearest even
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

bool CpuHasF16C() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}
#endif

}  // namespace

void HalfToFloatN(const uint16_t* in, float* out, int64_t n) {
#ifdef MXP_HAVE_X86
  if (CpuHasF16C()) return HalfToFloatF16C(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalfN(const float* in, uint16_t* out, int64_t n) {
#ifdef MXP_HAVE_X86
  if (CpuHasF16C()) return FloatToHalfF16C(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

}  // namespace mxplugin
