// float16 / bfloat16 <-> float32 conversions. Arithmetic on half types is
// always done in float32 (MPI has no half type, and rounding once at the end
// keeps sums accurate).
#pragma once

#include <cstdint>
#include <cstring>

namespace mxplugin {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // subnormal: value = mant * 2^-24, exactly representable in float
    float f = (float)mant * 5.9604644775390625e-08f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Round to nearest even; overflow goes to infinity as IEEE requires.
inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000u) {  // inf or nan
    return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  }
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float af;
    std::memcpy(&af, &absx, 4);
    // scale so that one half-subnormal ulp is 1.0, then round to nearest even
    float scaled = af * 16777216.0f;  // 2^24
    uint32_t m = (uint32_t)scaled;
    float rem = scaled - (float)m;
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
    return (uint16_t)(sign | m);
  }
  uint32_t exp = ((absx >> 23) - 112) << 10;
  uint32_t mant = (absx >> 13) & 0x3ff;
  uint32_t h = exp | mant;
  uint32_t rest = absx & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carry may bump exponent: correct
  return (uint16_t)(sign | h);
}

inline float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return (uint16_t)((x + rounding) >> 16);
}

}  // namespace mxplugin
