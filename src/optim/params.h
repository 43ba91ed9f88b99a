// Hyper-parameters of the fused optimizer updates: one struct per optimizer.
// Names, meanings and defaults are those of the MXNet 1.9.1 operator of the
// same name (`mx.nd.sgd_mom_update`, ...); as there, a negative
// clip_gradient, clip_weights, lower_bound or upper_bound means "off".
//
// Each struct is also its optimizer's descriptor: kKind (the name Python
// uses), kOpName (the MXNet op), kStateNames (its state buffers, in the op's
// argument order) and kNumStates. Adding a fused optimizer is a struct here,
// its kernel (kernels.h) and its entry in OptimizerParams (update.h).
#pragma once

#include <cstdint>

namespace mxplugin {
namespace optim {

// Fields every optimizer has.
struct CommonParams {
  float lr = 0.f;             // learning rate (Adam: already bias-corrected, see AdamParams)
  float wd = 0.f;             // weight decay
  float rescale_grad = 1.f;   // grad is multiplied by this first
  float clip_gradient = -1.f; // clip the rescaled grad into [-c, c] when c >= 0
};

// sgd_update.
struct SgdParams : CommonParams {
  static constexpr const char* kKind = "sgd";
  static constexpr const char* kOpName = "sgd_update";
  static constexpr const char* kStateNames = "";
  static constexpr int kNumStates = 0;
};

// sgd_mom_update.
struct SgdMomParams : CommonParams {
  static constexpr const char* kKind = "sgd_mom";
  static constexpr const char* kOpName = "sgd_mom_update";
  static constexpr const char* kStateNames = "mom";
  static constexpr int kNumStates = 1;

  float momentum = 0.f;
};

// nag_mom_update.
struct NagMomParams : CommonParams {
  static constexpr const char* kKind = "nag_mom";
  static constexpr const char* kOpName = "nag_mom_update";
  static constexpr const char* kStateNames = "mom";
  static constexpr int kNumStates = 1;

  float momentum = 0.f;
};

// adam_update. `lr` is the op's lr: mxnet.optimizer.Adam passes
// lr * sqrt(1 - beta2^t) / (1 - beta1^t); the caller folds that in.
struct AdamParams : CommonParams {
  static constexpr const char* kKind = "adam";
  static constexpr const char* kOpName = "adam_update";
  static constexpr const char* kStateNames = "mean, var";
  static constexpr int kNumStates = 2;

  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
};

// rmsprop_update (Tieleman & Hinton, not centered).
struct RmsPropParams : CommonParams {
  static constexpr const char* kKind = "rmsprop";
  static constexpr const char* kOpName = "rmsprop_update";
  static constexpr const char* kStateNames = "n";
  static constexpr int kNumStates = 1;

  float gamma1 = 0.95f;
  float epsilon = 1e-8f;
  float clip_weights = -1.f;  // clip the new weight into [-c, c] when c >= 0
};

// rmspropalex_update (Graves, centered).
struct RmsPropAlexParams : CommonParams {
  static constexpr const char* kKind = "rmspropalex";
  static constexpr const char* kOpName = "rmspropalex_update";
  static constexpr const char* kStateNames = "n, g, delta";
  static constexpr int kNumStates = 3;

  float gamma1 = 0.95f;
  float gamma2 = 0.9f;
  float epsilon = 1e-8f;
  float clip_weights = -1.f;
};

// mxnet.optimizer.AdaGrad on dense arrays, which uses NDArray arithmetic
// rather than an op; epsilon is the optimizer's `eps` (float_stable_eps).
struct AdaGradParams : CommonParams {
  static constexpr const char* kKind = "adagrad";
  static constexpr const char* kOpName = "adagrad";
  static constexpr const char* kStateNames = "history";
  static constexpr int kNumStates = 1;

  float epsilon = 1e-7f;
};

// lamb_update_phase1 followed, per tensor, by lamb_update_phase2 with
// r1 = ||weight||, r2 = ||g|| (as mxnet.optimizer.LAMB does).
struct LambParams : CommonParams {
  static constexpr const char* kKind = "lamb";
  static constexpr const char* kOpName = "lamb_update";
  static constexpr const char* kStateNames = "mean, var";
  static constexpr int kNumStates = 2;

  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-6f;
  int32_t t = 1;               // update count of the tensors (>= 1)
  bool bias_correction = true;
  float lower_bound = -1.f;    // r1 = max(r1, lower_bound) when >= 0
  float upper_bound = -1.f;    // r1 = min(r1, upper_bound) when >= 0
};

}  // namespace optim
}  // namespace mxplugin
