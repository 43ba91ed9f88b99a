// PowerSGD's passes over the gradients (framework-neutral, float32, one
// thread): the three stages between and after its two allreduces, each one
// pass over a gradient's matrix with the rank-r factors kept in cache.
//
// Note [PowerSGD passes]: a gradient is an m x n row-major matrix G with
// its error buffer E (m x n) and factors P (r x rows) and Q (r x cols),
// stored transposed (row k of P is the k-th column of the paper's P).
// With m <= n the compressed matrix is A = E (rows = m, cols = n); with
// m > n it is A = E^T (rows = n, cols = m), so that rows <= cols.
//   Accumulate:  E += G;  P = Q A^T             reads G, E, writes E
//   (P is summed over the ranks and orthonormalised: rows of P^)
//   Residual:    Q = P^ A;  E -= P^^T Q         reads E, writes E
//   (Q is summed over the ranks)
//   Reconstruct: G = P^^T Q (as m x n)          writes G
// Six streams of the gradient's size in all are the floor of the method
// (24 bytes per value): E must be read and written twice (once before P
// is known, once after) and G read once and written once. Residual needs
// all of a column of A before it can subtract from it, so where that
// column is a column of E (m <= n) it reads E twice.
//
// Every sum is taken in one fixed order (lanes of 8, combined pairwise), so
// a build gives the same bits every run.
#pragma once

#include <cstdint>

namespace mxplugin {
namespace compress {

struct PowerSgdMatrix {
  float* grad = nullptr;   // m x n
  float* error = nullptr;  // m x n
  float* p = nullptr;      // rank x rows
  float* q = nullptr;      // rank x cols
  int64_t m = 0, n = 0;
  int rank = 0;
  bool transposed() const { return m > n; }
  int64_t rows() const { return transposed() ? n : m; }
  int64_t cols() const { return transposed() ? m : n; }
};

enum class PowerSgdStage { kAccumulate = 0, kResidual = 1, kReconstruct = 2 };
constexpr int kPowerSgdStages = 3;

// Throws Error(InvalidArgument) naming what is wrong: sizes not positive,
// rank not in [1, rows] (the buffers are not looked at).
void CheckPowerSgdShape(const PowerSgdMatrix& matrix);

void RunPowerSgdStage(PowerSgdStage stage, const PowerSgdMatrix& matrix);

}  // namespace compress
}  // namespace mxplugin
