#include "common/reduce.h"

#include <cstring>

#include <algorithm>

#include "common/half.h"
#include "common/half_vector.h"

namespace mxplugin {
namespace {

struct Sum { template <typename T> T operator()(T a, T b) const { return a + b; } };
struct Min { template <typename T> T operator()(T a, T b) const { return std::min(a, b); } };
struct Max { template <typename T> T operator()(T a, T b) const { return std::max(a, b); } };
struct Prod { template <typename T> T operator()(T a, T b) const { return a * b; } };

// One loop per (type, op), so the compiler vectorises it.
template <typename T, typename Op>
void Plain(void* out, const void* a_, const void* b_, int64_t n) {
  T* o = static_cast<T*>(out);
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  const Op op;
  for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
}

template <typename Op>
void Float16(void* out, const void* a_, const void* b_, int64_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* a = static_cast<const uint16_t*>(a_);
  const auto* b = static_cast<const uint16_t*>(b_);
  float wa[kHalfChunk], wb[kHalfChunk];
  const Op op;
  for (int64_t start = 0; start < n; start += kHalfChunk) {
    const int64_t m = std::min(kHalfChunk, n - start);
    HalfToFloatN(a + start, wa, m);
    HalfToFloatN(b + start, wb, m);
    for (int64_t i = 0; i < m; ++i) wa[i] = op(wa[i], wb[i]);
    FloatToHalfN(wa, o + start, m);
  }
}

template <typename Op>
void BFloat16(void* out, const void* a_, const void* b_, int64_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* a = static_cast<const uint16_t*>(a_);
  const auto* b = static_cast<const uint16_t*>(b_);
  const Op op;
  for (int64_t i = 0; i < n; ++i) o[i] = FloatToBFloat16(op(BFloat16ToFloat(a[i]), BFloat16ToFloat(b[i])));
}

template <typename Op>
void WithOp(void* out, const void* a, const void* b, int64_t n, DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return Plain<uint8_t, Op>(out, a, b, n);
    case DataType::kInt8: return Plain<int8_t, Op>(out, a, b, n);
    case DataType::kInt32: return Plain<int32_t, Op>(out, a, b, n);
    case DataType::kInt64: return Plain<int64_t, Op>(out, a, b, n);
    case DataType::kFloat32: return Plain<float, Op>(out, a, b, n);
    case DataType::kFloat64: return Plain<double, Op>(out, a, b, n);
    case DataType::kFloat16: return Float16<Op>(out, a, b, n);
    case DataType::kBFloat16: return BFloat16<Op>(out, a, b, n);
  }
}

}  // namespace

void ReduceTo(void* out, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return WithOp<Sum>(out, a, b, count, dtype);
    case ReduceOp::kMin: return WithOp<Min>(out, a, b, count, dtype);
    case ReduceOp::kMax: return WithOp<Max>(out, a, b, count, dtype);
    case ReduceOp::kProduct: return WithOp<Prod>(out, a, b, count, dtype);
  }
}

void ReduceInto(void* acc, const void* in, int64_t count, DataType dtype, ReduceOp op) {
  ReduceTo(acc, acc, in, count, dtype, op);
}

void ReduceInRankOrder(void* out, const void* const* terms, int n, int64_t count, DataType dtype, ReduceOp op) {
  if (count == 0 || n == 0) return;
  if (n == 1) {
    if (out != terms[0]) std::memmove(out, terms[0], static_cast<size_t>(count) * DataTypeSize(dtype));
    return;
  }
  ReduceTo(out, terms[0], terms[1], count, dtype, op);
  for (int k = 2; k < n; ++k) ReduceTo(out, out, terms[k], count, dtype, op);
}

}  // namespace mxplugin
