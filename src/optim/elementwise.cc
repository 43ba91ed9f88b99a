// The element-wise updates (everything but LAMB).
//
// Note [Matching MXNet]: each loop body is the MXNet 1.9.1 CPU kernel
// (src/operator/optimizer_op-inl.h) for one element, in float32, with the
// operations in the same order and grouping, as the op behaves when called
// in place (out=weight, as mxnet.optimizer does), so that results agree to
// the last bit where the compilers agree (no FMA contraction: the default
// x86-64 target has none). Against the mxnet 1.9.1 wheel they are bit-equal;
// tests/test_fused_kernels.py requires 1e-5.
// Hyper-parameters are float32, as the ops cast them. MXNet tests
// `clip >= 0` per element; here the test is hoisted (clip.h) and each loop
// is instantiated with and without clipping.
#include <cmath>

#include "optim/clip.h"
#include "optim/kernels.h"

namespace mxplugin {
namespace optim {
namespace {

// SGDKernel.
template <bool kClip>
void SgdLoop(const SgdParams p, float* __restrict__ w, const float* __restrict__ g, int64_t n) {
  const float decay = 1.f - p.lr * p.wd;
  const float lr_rescale = p.lr * p.rescale_grad;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kClip) {
      w[i] = decay * w[i] - p.lr * Clip(p.rescale_grad * g[i], p.clip_gradient);
    } else {
      w[i] = decay * w[i] - lr_rescale * g[i];
    }
  }
}

// SGDMomKernel.
template <bool kClip>
void SgdMomLoop(const SgdMomParams p, float* __restrict__ w, const float* __restrict__ g,
                float* __restrict__ mom, int64_t n) {
  const float lr_wd = p.lr * p.wd;
  const float lr_rescale = p.lr * p.rescale_grad;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kClip) {
      mom[i] = p.momentum * mom[i] - lr_wd * w[i] - p.lr * Clip(p.rescale_grad * g[i], p.clip_gradient);
    } else {
      mom[i] = p.momentum * mom[i] - lr_wd * w[i] - lr_rescale * g[i];
    }
    w[i] = w[i] + mom[i];
  }
}

// NAGMomKernel, as run by mxnet.optimizer.NAG: in place (out=weight), so the
// kernel's momentum update, which comes after its weight write, reads the
// new weight in the weight-decay term.
template <bool kClip>
void NagMomLoop(const NagMomParams p, float* __restrict__ w, const float* __restrict__ g,
                float* __restrict__ mom, int64_t n) {
  const float momentum_plus_one = p.momentum + 1.f;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = MaybeClip<kClip>(p.rescale_grad * g[i], p.clip_gradient);
    const float decayed = p.momentum * mom[i];
    const float updated = w[i] - decayed + momentum_plus_one * (decayed - p.lr * (scaled + p.wd * w[i]));
    mom[i] = decayed - p.lr * (scaled + p.wd * updated);
    w[i] = updated;
  }
}

// AdamUpdateKernel (weight decay before clipping).
template <bool kClip>
void AdamLoop(const AdamParams p, float* __restrict__ w, const float* __restrict__ g,
              float* __restrict__ mean, float* __restrict__ var, int64_t n) {
  const float one_minus_beta1 = 1.f - p.beta1;
  const float one_minus_beta2 = 1.f - p.beta2;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = MaybeClip<kClip>(g[i] * p.rescale_grad + w[i] * p.wd, p.clip_gradient);
    mean[i] = p.beta1 * mean[i] + one_minus_beta1 * scaled;
    var[i] = p.beta2 * var[i] + one_minus_beta2 * scaled * scaled;
    w[i] = w[i] - p.lr * mean[i] / (std::sqrt(var[i]) + p.epsilon);
  }
}

// RMSPropUpdateKernel.
template <bool kClipGrad, bool kClipWeight>
void RmsPropLoop(const RmsPropParams p, float* __restrict__ w, const float* __restrict__ g,
                 float* __restrict__ state_n, int64_t n) {
  const float one_minus_gamma1 = 1.f - p.gamma1;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = MaybeClip<kClipGrad>(p.rescale_grad * g[i] + p.wd * w[i], p.clip_gradient);
    state_n[i] = one_minus_gamma1 * (scaled * scaled) + p.gamma1 * state_n[i];
    const float updated = w[i] - p.lr * (scaled / std::sqrt(state_n[i] + p.epsilon));
    w[i] = MaybeClip<kClipWeight>(updated, p.clip_weights);
  }
}

// RMSPropAlexUpdateKernel. clip_weights clips the new weight only; delta
// keeps the unclipped step.
template <bool kClipGrad, bool kClipWeight>
void RmsPropAlexLoop(const RmsPropAlexParams p, float* __restrict__ w, const float* __restrict__ g,
                     float* __restrict__ state_n, float* __restrict__ state_g,
                     float* __restrict__ delta, int64_t n) {
  const float one_minus_gamma1 = 1.f - p.gamma1;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = MaybeClip<kClipGrad>(p.rescale_grad * g[i] + p.wd * w[i], p.clip_gradient);
    state_n[i] = one_minus_gamma1 * scaled * scaled + p.gamma1 * state_n[i];
    state_g[i] = one_minus_gamma1 * scaled + p.gamma1 * state_g[i];
    delta[i] = p.gamma2 * delta[i] -
               (p.lr * scaled / std::sqrt(state_n[i] - state_g[i] * state_g[i] + p.epsilon));
    w[i] = MaybeClip<kClipWeight>(w[i] + delta[i], p.clip_weights);
  }
}

// mxnet.optimizer.AdaGrad.update, dense branch: one NDArray op per line,
// each rounding to float32 with the Python scalars cast to float32.
template <bool kClip>
void AdaGradLoop(const AdaGradParams p, float* __restrict__ w, const float* __restrict__ g,
                 float* __restrict__ history, int64_t n) {
  const float minus_lr = -p.lr;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = MaybeClip<kClip>(g[i] * p.rescale_grad, p.clip_gradient);
    history[i] = history[i] + scaled * scaled;
    const float div = scaled / std::sqrt(history[i] + p.epsilon);
    w[i] = w[i] + (div + w[i] * p.wd) * minus_lr;
  }
}

}  // namespace

void Update(const SgdParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip) {
    SgdLoop<decltype(clip)::value>(p, b.weight, b.grad, b.size);
  });
}

void Update(const SgdMomParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip) {
    SgdMomLoop<decltype(clip)::value>(p, b.weight, b.grad, b.states[0], b.size);
  });
}

void Update(const NagMomParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip) {
    NagMomLoop<decltype(clip)::value>(p, b.weight, b.grad, b.states[0], b.size);
  });
}

void Update(const AdamParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip) {
    AdamLoop<decltype(clip)::value>(p, b.weight, b.grad, b.states[0], b.states[1], b.size);
  });
}

void Update(const RmsPropParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip_grad) {
    WithClip(p.clip_weights, [&](auto clip_weight) {
      RmsPropLoop<decltype(clip_grad)::value, decltype(clip_weight)::value>(p, b.weight, b.grad, b.states[0],
                                                                            b.size);
    });
  });
}

void Update(const RmsPropAlexParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip_grad) {
    WithClip(p.clip_weights, [&](auto clip_weight) {
      RmsPropAlexLoop<decltype(clip_grad)::value, decltype(clip_weight)::value>(
          p, b.weight, b.grad, b.states[0], b.states[1], b.states[2], b.size);
    });
  });
}

void Update(const AdaGradParams& p, const FlatBuffers& b) {
  WithClip(p.clip_gradient, [&](auto clip) {
    AdaGradLoop<decltype(clip)::value>(p, b.weight, b.grad, b.states[0], b.size);
  });
}

}  // namespace optim
}  // namespace mxplugin
