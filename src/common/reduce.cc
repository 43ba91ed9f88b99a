#include "common/reduce.h"

#include <algorithm>
#include <cstring>

#include "common/half.h"
#include "common/half_vector.h"

namespace mxplugin {
namespace {

struct Sum { template <typename T> T operator()(T a, T b) const { return a + b; } };
struct Min { template <typename T> T operator()(T a, T b) const { return std::min(a, b); } };
struct Max { template <typename T> T operator()(T a, T b) const { return std::max(a, b); } };
struct Prod { template <typename T> T operator()(T a, T b) const { return a * b; } };

// One loop per (type, op, second store or not), so the compiler vectorises it.
template <typename T, typename Op>
void Plain(void* out, void* also, const void* a_, const void* b_, int64_t n) {
  T* o = static_cast<T*>(out);
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  const Op op;
  if (also == nullptr) {
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
  } else {
    T* o2 = static_cast<T*>(also);
    for (int64_t i = 0; i < n; ++i) o[i] = o2[i] = op(a[i], b[i]);
  }
}

template <typename Op>
void Float16(void* out, void* also, const void* a_, const void* b_, int64_t n) {
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
    if (also != nullptr) std::memcpy(static_cast<uint16_t*>(also) + start, o + start, m * sizeof(uint16_t));
  }
}

template <typename Op>
void BFloat16(void* out, void* also, const void* a_, const void* b_, int64_t n) {
  auto* o = static_cast<uint16_t*>(out);
  auto* o2 = static_cast<uint16_t*>(also);
  const auto* a = static_cast<const uint16_t*>(a_);
  const auto* b = static_cast<const uint16_t*>(b_);
  const Op op;
  for (int64_t i = 0; i < n; ++i) {
    o[i] = FloatToBFloat16(op(BFloat16ToFloat(a[i]), BFloat16ToFloat(b[i])));
    if (o2 != nullptr) o2[i] = o[i];
  }
}

template <typename Op>
void WithOp(void* out, void* also, const void* a, const void* b, int64_t n, DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return Plain<uint8_t, Op>(out, also, a, b, n);
    case DataType::kInt8: return Plain<int8_t, Op>(out, also, a, b, n);
    case DataType::kInt32: return Plain<int32_t, Op>(out, also, a, b, n);
    case DataType::kInt64: return Plain<int64_t, Op>(out, also, a, b, n);
    case DataType::kFloat32: return Plain<float, Op>(out, also, a, b, n);
    case DataType::kFloat64: return Plain<double, Op>(out, also, a, b, n);
    case DataType::kFloat16: return Float16<Op>(out, also, a, b, n);
    case DataType::kBFloat16: return BFloat16<Op>(out, also, a, b, n);
  }
}

}  // namespace

void ReduceTo(void* out, void* also, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return WithOp<Sum>(out, also, a, b, count, dtype);
    case ReduceOp::kMin: return WithOp<Min>(out, also, a, b, count, dtype);
    case ReduceOp::kMax: return WithOp<Max>(out, also, a, b, count, dtype);
    case ReduceOp::kProduct: return WithOp<Prod>(out, also, a, b, count, dtype);
  }
}

void ReduceInto(void* acc, const void* in, int64_t count, DataType dtype, ReduceOp op) {
  ReduceTo(acc, nullptr, acc, in, count, dtype, op);
}

}  // namespace mxplugin
