#include "compress/powersgd.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/status.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace mxplugin {
namespace compress {
namespace {

constexpr int kLanes = 8;
constexpr int kChunk = 4;  // factors handled together: one pass over a row serves kChunk of them

// Note [PowerSGD vector code]: the passes are compute-bound at the default
// x86-64 target (SSE2, no FMA: about 2 r multiply-adds per value and
// pass), so the stage functions are also compiled for x86-64-v3 (AVX2,
// FMA) and the loader picks the clone the CPU runs. The clones differ in
// rounding (FMA), so bits are the same run after run on one machine, not
// across machines of different CPUs. Everything below is inlined into them.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MXP_POWERSGD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#else
#define MXP_POWERSGD_CLONES
#endif

// kLanes floats, one register where the target has 8-wide vectors (two
// otherwise): running sums in named vectors stay in registers.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

inline Lanes Load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// out[k] = x[k] . b for k < K, each in kLanes running sums combined pairwise.
template <int K>
inline void Dots(const float* const* x, const float* __restrict__ b, int64_t n, float* out) {
  Lanes sum[K] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Lanes bj = Load(b + j);
    for (int k = 0; k < K; ++k) sum[k] += Load(x[k] + j) * bj;
  }
  for (int k = 0; k < K; ++k) {
    float lane[kLanes];
    std::memcpy(lane, &sum[k], sizeof lane);
    for (int64_t t = j, l = 0; t < n; ++t, ++l) lane[l] += x[k][t] * b[t];
    for (int width = kLanes / 2; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
    }
    out[k] = lane[0];
  }
}

inline void Store(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }

// y[k] += sum_r alpha[r][k] x[r] for k < K (added in r's order): one read
// and one write of each y[k] for R rows x.
template <int K, int R>
inline void Spread(const float (&alpha)[R][K], const float* const (&x)[R], float* const* y, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Lanes v[R];
    for (int r = 0; r < R; ++r) v[r] = Load(x[r] + j);
    for (int k = 0; k < K; ++k) {
      Lanes sum = Load(y[k] + j);
      for (int r = 0; r < R; ++r) sum += alpha[r][k] * v[r];
      Store(y[k] + j, sum);
    }
  }
  for (; j < n; ++j) {
    for (int k = 0; k < K; ++k) {
      for (int r = 0; r < R; ++r) y[k][j] += alpha[r][k] * x[r][j];
    }
  }
}

// y += sum_k alpha[k] x[k] (y = the sum when kAssign), added in k's order.
template <int K, bool kAssign>
inline void Gather(const float* alpha, const float* const* x, float* __restrict__ y, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Lanes v = kAssign ? Lanes{} : Load(y + j);
    for (int k = 0; k < K; ++k) v += alpha[k] * Load(x[k] + j);
    Store(y + j, v);
  }
  for (; j < n; ++j) {
    float v = kAssign ? 0.f : y[j];
    for (int k = 0; k < K; ++k) v += alpha[k] * x[k][j];
    y[j] = v;
  }
}

// y = sum_k alpha[k] x[k], written past the caches (non-temporal stores
// where the target has them): the gradient is read next by the optimizer,
// long after, so loading its old values into the cache only to overwrite
// them would double the pass's traffic. Call StreamsDone() after the last.
template <int K>
inline void GatherStreamed(const float* alpha, const float* const* x, float* __restrict__ y, int64_t n) {
#if defined(__SSE2__)
  int64_t j = 0;
  auto one = [&](int64_t t) {
    float v = 0.f;
    for (int k = 0; k < K; ++k) v += alpha[k] * x[k][t];
    y[t] = v;
  };
  for (; j < n && (reinterpret_cast<uintptr_t>(y + j) % 16) != 0; ++j) one(j);
  for (; j + kLanes <= n; j += kLanes) {
    Lanes v = {};
    for (int k = 0; k < K; ++k) v += alpha[k] * Load(x[k] + j);
    float lanes[kLanes];
    std::memcpy(lanes, &v, sizeof lanes);
    _mm_stream_ps(y + j, _mm_loadu_ps(lanes));
    _mm_stream_ps(y + j + 4, _mm_loadu_ps(lanes + 4));
  }
  for (; j < n; ++j) one(j);
#else
  Gather<K, true>(alpha, x, y, n);
#endif
}

inline void StreamsDone() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Runs body(chunk-size constant, first factor) over the factors [0, rank)
// in chunks of kChunk and one chunk of the rest.
template <typename Body>
inline void ForChunks(int rank, Body&& body) {
  int k = 0;
  for (; k + kChunk <= rank; k += kChunk) body(std::integral_constant<int, kChunk>(), k);
  switch (rank - k) {
    case 1: body(std::integral_constant<int, 1>(), k); break;
    case 2: body(std::integral_constant<int, 2>(), k); break;
    case 3: body(std::integral_constant<int, 3>(), k); break;
    default: break;
  }
}

// Pointers to rows [k, k + K) of an r x len matrix.
template <int K>
inline void RowsOf(const float* matrix, int64_t len, int k, const float* (&out)[K]) {
  for (int c = 0; c < K; ++c) out[c] = matrix + (k + c) * len;
}

template <int K>
inline void RowsOf(float* matrix, int64_t len, int k, float* (&out)[K]) {
  for (int c = 0; c < K; ++c) out[c] = matrix + (k + c) * len;
}

// Column i of an r x len matrix, entries [k, k + K).
template <int K>
inline void ColumnOf(const float* matrix, int64_t len, int64_t i, int k, float (&out)[K], float sign = 1.f) {
  for (int c = 0; c < K; ++c) out[c] = sign * matrix[(k + c) * len + i];
}

inline void Add(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) Store(y + j, Load(y + j) + Load(x + j));
  for (; j < n; ++j) y[j] += x[j];
}

// The row operations of the passes. A factor matrix F is rank x len (row k
// of F at F + k * len); "column i of C" is C[k][i] for every k (C rank x m).

// C[k][i] = F[k] . x, for every k.
inline void DotsIntoColumn(const float* f, const float* x, int64_t len, float* c, int64_t m, int64_t i, int rank) {
  ForChunks(rank, [&](auto size, int k) {
    constexpr int K = decltype(size)::value;
    const float* rows[K];
    float dots[K];
    RowsOf<K>(f, len, k, rows);
    Dots<K>(rows, x, len, dots);
    for (int c_k = 0; c_k < K; ++c_k) c[(k + c_k) * m + i] = dots[c_k];
  });
}

// F[k] += sum_r C[k][i + r] x[r] for every k, for R rows x of the matrix
// from row i (R rows at once: F is the pass's only written stream).
template <int R>
inline void SpreadColumns(const float* c, int64_t m, int64_t i, const float* const (&x)[R], float* f, int64_t len,
                          int rank) {
  ForChunks(rank, [&](auto size, int k) {
    constexpr int K = decltype(size)::value;
    float* rows[K];
    float alpha[R][K];
    RowsOf<K>(f, len, k, rows);
    for (int r = 0; r < R; ++r) ColumnOf<K>(c, m, i + r, k, alpha[r]);
    Spread<K, R>(alpha, x, rows, len);
  });
}

constexpr int kSpreadRows = 4;

// F[k] += sum_i C[k][i] X[i] over the rows X[i] of an m x len matrix (each
// row prepared first by prepare(i), e.g. E[i] += G[i]).
template <typename Prepare>
inline void SpreadAllColumns(const float* c, int64_t m, float* x, float* f, int64_t len, int rank,
                             Prepare&& prepare) {
  int64_t i = 0;
  for (; i + kSpreadRows <= m; i += kSpreadRows) {
    const float* rows[kSpreadRows];
    for (int r = 0; r < kSpreadRows; ++r) {
      prepare(i + r);
      rows[r] = x + (i + r) * len;
    }
    SpreadColumns<kSpreadRows>(c, m, i, rows, f, len, rank);
  }
  for (; i < m; ++i) {
    prepare(i);
    const float* rows[1] = {x + i * len};
    SpreadColumns<1>(c, m, i, rows, f, len, rank);
  }
}

// y = sum_k C[k][i] F[k] (kAssign), or y -= that sum.
template <bool kAssign>
inline void CombineRows(const float* c, int64_t m, int64_t i, const float* f, float* y, int64_t len, int rank) {
  ForChunks(rank, [&](auto size, int k) {
    constexpr int K = decltype(size)::value;
    const float* rows[K];
    float alpha[K];
    RowsOf<K>(f, len, k, rows);
    ColumnOf<K>(c, m, i, k, alpha, kAssign ? 1.f : -1.f);
    if (kAssign && k == 0) {
      Gather<K, true>(alpha, rows, y, len);
    } else {
      Gather<K, false>(alpha, rows, y, len);
    }
  });
}

// A = E (m <= n): P[k][i] = Q[k] . E[i], row by row.
MXP_POWERSGD_CLONES void AccumulateRows(const PowerSgdMatrix& a) {
  for (int64_t i = 0; i < a.m; ++i) {
    float* e = a.error + i * a.n;
    Add(a.grad + i * a.n, e, a.n);
    DotsIntoColumn(a.q, e, a.n, a.p, a.m, i, a.rank);
  }
}

// A = E^T (m > n): P[k] = sum_i Q[k][i] E[i], row by row.
MXP_POWERSGD_CLONES void AccumulateColumns(const PowerSgdMatrix& a) {
  std::fill(a.p, a.p + static_cast<int64_t>(a.rank) * a.n, 0.f);
  SpreadAllColumns(a.q, a.m, a.error, a.p, a.n, a.rank,
                   [&](int64_t i) { Add(a.grad + i * a.n, a.error + i * a.n, a.n); });
}

// A = E (m <= n): Q[k] = sum_i P[k][i] E[i], then E[i] -= sum_k P[k][i]
// Q[k]: two passes over E's rows in order (a pass over blocks of columns,
// which would read E once, measured no faster: its rows' pieces are far
// apart in memory).
MXP_POWERSGD_CLONES void ResidualRows(const PowerSgdMatrix& a) {
  std::fill(a.q, a.q + static_cast<int64_t>(a.rank) * a.n, 0.f);
  SpreadAllColumns(a.p, a.m, a.error, a.q, a.n, a.rank, [](int64_t) {});
  for (int64_t i = 0; i < a.m; ++i) CombineRows<false>(a.p, a.m, i, a.q, a.error + i * a.n, a.n, a.rank);
}

// A = E^T (m > n): Q[k][i] = P[k] . E[i], then E[i] -= sum_k Q[k][i] P[k].
MXP_POWERSGD_CLONES void ResidualColumns(const PowerSgdMatrix& a) {
  for (int64_t i = 0; i < a.m; ++i) {
    float* e = a.error + i * a.n;
    DotsIntoColumn(a.p, e, a.n, a.q, a.m, i, a.rank);
    CombineRows<false>(a.q, a.m, i, a.p, e, a.n, a.rank);
  }
}

// G[i] = sum_k P[k][i] Q[k] (m <= n) or sum_k Q[k][i] P[k] (m > n).
MXP_POWERSGD_CLONES void Reconstruct(const PowerSgdMatrix& a) {
  const float* left = a.transposed() ? a.q : a.p;    // rank x m
  const float* right = a.transposed() ? a.p : a.q;   // rank x n
  if (a.rank > kChunk) {  // later chunks add to what the first wrote: keep it in cache
    for (int64_t i = 0; i < a.m; ++i) CombineRows<true>(left, a.m, i, right, a.grad + i * a.n, a.n, a.rank);
    return;
  }
  for (int64_t i = 0; i < a.m; ++i) {
    ForChunks(a.rank, [&](auto size, int k) {
      constexpr int K = decltype(size)::value;
      const float* rows[K];
      float alpha[K];
      RowsOf<K>(right, a.n, k, rows);
      ColumnOf<K>(left, a.m, i, k, alpha);
      GatherStreamed<K>(alpha, rows, a.grad + i * a.n, a.n);
    });
  }
  StreamsDone();
}

}  // namespace

void CheckPowerSgdShape(const PowerSgdMatrix& a) {
  if (a.m < 1 || a.n < 1) {
    throw Error(Status::InvalidArgument("PowerSGD: a gradient matrix must be at least 1 x 1, got " +
                                        std::to_string(a.m) + " x " + std::to_string(a.n)));
  }
  if (a.rank < 1 || a.rank > a.rows()) {
    throw Error(Status::InvalidArgument("PowerSGD: rank " + std::to_string(a.rank) + " is not in [1, " +
                                        std::to_string(a.rows()) + "] for a " + std::to_string(a.m) + " x " +
                                        std::to_string(a.n) + " gradient"));
  }
}

void RunPowerSgdStage(PowerSgdStage stage, const PowerSgdMatrix& a) {
  switch (stage) {
    case PowerSgdStage::kAccumulate: return a.transposed() ? AccumulateColumns(a) : AccumulateRows(a);
    case PowerSgdStage::kResidual: return a.transposed() ? ResidualColumns(a) : ResidualRows(a);
    case PowerSgdStage::kReconstruct: return Reconstruct(a);
  }
  throw Error(Status::InvalidArgument("PowerSGD: unknown stage " + std::to_string(static_cast<int>(stage))));
}

}  // namespace compress
}  // namespace mxplugin
