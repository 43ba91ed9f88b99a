// LAMB over many tensors laid out back to back in one flat buffer.
//
// Per tensor, as mxnet.optimizer.LAMB does with the ops: g = phase1(...)
// (updates mean and var), r1 = ||weight||, r2 = ||g||, then
// weight -= phase2_lr(r1, r2) * g. Two passes per tensor: the first updates
// mean/var and accumulates both squared norms; the second recomputes g from
// the updated mean/var and the (still unchanged) weight, which gives the same
// bits as the first pass, instead of storing g in a scratch buffer.
// Norms accumulate in double, then round to float32 like the ops' r1/r2
// arrays (MXNet sums in float32; the difference is in the last bits of r1/r2).
#include <cmath>

#include "optim/clip.h"
#include "optim/kernels.h"

namespace mxplugin {
namespace optim {
namespace {

// Loop invariants of lamb_update_phase1, typed as the op computes them.
struct Phase1Constants {
  float rescale_grad, clip_gradient, beta1, beta2, epsilon, wd;
  // beta1^t and beta2^t: std::pow(float, int) evaluates in double, the op
  // stores float; mean is then divided in double (1. - beta1_t), var in
  // float (1 - beta2_t).
  double mean_divisor;
  float var_divisor;
};

Phase1Constants MakeConstants(const LambParams& p) {
  const float beta1_t = static_cast<float>(std::pow(static_cast<double>(p.beta1), p.t));
  const float beta2_t = static_cast<float>(std::pow(static_cast<double>(p.beta2), p.t));
  return {p.rescale_grad, p.clip_gradient, p.beta1, p.beta2, p.epsilon, p.wd,
          1.0 - static_cast<double>(beta1_t), 1.f - beta2_t};
}

// lamb_update_phase1's g from the updated mean and var.
template <bool kBias>
inline float Direction(const Phase1Constants& c, float mean, float var, float w) {
  if constexpr (kBias) {
    const float mean_hat = static_cast<float>(static_cast<double>(mean) / c.mean_divisor);
    const float var_hat = var / c.var_divisor;
    return mean_hat / (std::sqrt(var_hat) + c.epsilon) + c.wd * w;
  } else {
    return mean / (std::sqrt(var) + c.epsilon) + c.wd * w;
  }
}

struct SquaredNorms {
  double weight = 0, direction = 0;
};

// Note [Vectorised reductions]: without -ffast-math the compiler keeps a
// single sum in program order and cannot vectorise it; kLanes independent
// partial sums (combined at the end) let it.
constexpr int kLanes = 8;

// lamb_update_phase1 for one element: updates mean and var, returns g.
template <bool kClip, bool kBias>
inline float Phase1Element(const Phase1Constants& c, float grad, float w, float& mean, float& var) {
  const float scaled = MaybeClip<kClip>(grad * c.rescale_grad, c.clip_gradient);
  mean = c.beta1 * mean + (1.f - c.beta1) * scaled;
  var = c.beta2 * var + (1.f - c.beta2) * scaled * scaled;
  return Direction<kBias>(c, mean, var, w);
}

template <bool kClip, bool kBias>
SquaredNorms Phase1(const Phase1Constants c, const float* __restrict__ w, const float* __restrict__ g,
                    float* __restrict__ mean, float* __restrict__ var, int64_t n) {
  double sum_w[kLanes] = {}, sum_d[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const int64_t k = i + lane;
      const double d = Phase1Element<kClip, kBias>(c, g[k], w[k], mean[k], var[k]);
      sum_w[lane] += static_cast<double>(w[k]) * w[k];
      sum_d[lane] += d * d;
    }
  }
  for (; i < n; ++i) {
    const double d = Phase1Element<kClip, kBias>(c, g[i], w[i], mean[i], var[i]);
    sum_w[0] += static_cast<double>(w[i]) * w[i];
    sum_d[0] += d * d;
  }
  SquaredNorms out;
  for (int lane = 0; lane < kLanes; ++lane) {
    out.weight += sum_w[lane];
    out.direction += sum_d[lane];
  }
  return out;
}

template <bool kBias>
void Phase2(const Phase1Constants c, float lr, float* __restrict__ w, const float* __restrict__ mean,
            const float* __restrict__ var, int64_t n) {
  for (int64_t i = 0; i < n; ++i) w[i] = w[i] - lr * Direction<kBias>(c, mean[i], var[i], w[i]);
}

// mshadow_op::maximum / minimum: a NaN first operand is kept.
inline float Maximum(float a, float b) { return std::isnan(a) ? a : (a > b ? a : b); }
inline float Minimum(float a, float b) { return std::isnan(a) ? a : (a < b ? a : b); }

// lamb_update_phase2's learning rate.
float Phase2Rate(const LambParams& p, float r1, float r2) {
  if (p.lower_bound >= 0.f) r1 = Maximum(r1, p.lower_bound);
  if (p.upper_bound >= 0.f) r1 = Minimum(r1, p.upper_bound);
  if (r1 == 0.f || r2 == 0.f) return p.lr;
  return p.lr * r1 / r2;
}

template <bool kClip, bool kBias>
void UpdateTensors(const LambParams& p, const FlatBuffers& b) {
  const Phase1Constants c = MakeConstants(p);
  const int64_t whole[2] = {0, b.size};
  const int64_t* offsets = b.offsets != nullptr ? b.offsets : whole;
  const int64_t count = b.offsets != nullptr ? b.num_segments : 1;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t begin = offsets[k];
    const int64_t n = offsets[k + 1] - begin;
    float* w = b.weight + begin;
    float* mean = b.states[0] + begin;
    float* var = b.states[1] + begin;
    const SquaredNorms norms = Phase1<kClip, kBias>(c, w, b.grad + begin, mean, var, n);
    const float r1 = static_cast<float>(std::sqrt(norms.weight));
    const float r2 = static_cast<float>(std::sqrt(norms.direction));
    Phase2<kBias>(c, Phase2Rate(p, r1, r2), w, mean, var, n);
  }
}

}  // namespace

void Update(const LambParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip) {
    if (p.bias_correction) {
      UpdateTensors<decltype(clip)::value, true>(p, b);
    } else {
      UpdateTensors<decltype(clip)::value, false>(p, b);
    }
  });
}

}  // namespace optim
}  // namespace mxplugin
