// Bulk float16 <-> float32 conversion, with F16C instructions where the CPU
// has them (checked once at run time) and the portable scalar code otherwise.
// Used by the scale loops and the MPI half reductions, which work on chunks:
// widen, compute in float32, round once.
#pragma once

#include <cstdint>

namespace mxplugin {

void HalfToFloatN(const uint16_t* in, float* out, int64_t n);
void FloatToHalfN(const float* in, uint16_t* out, int64_t n);

// Elements per chunk when a half loop widens into a stack buffer.
constexpr int64_t kHalfChunk = 1024;

}  // namespace mxplugin
