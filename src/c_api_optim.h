/* The C surface of the fused optimizer updates (src/optim/), used by the
 * Cython binding. Conventions as in c_api.h: every function returns 0 on
 * success or a StatusCode, and mxp_last_error() then holds the message. */
#ifndef MXPLUGIN_C_API_OPTIM_H_
#define MXPLUGIN_C_API_OPTIM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hyper-parameters of one update: the union of every optimizer's fields
 * (src/optim/params.h documents them). Start from mxp_optim_default_params
 * and change fields with mxp_optim_set_param. */
typedef struct {
  int32_t kind; /* OptimizerKind, 0 .. mxp_optim_num_kinds() - 1 (mxp_optim_kind_name) */
  float lr, wd, rescale_grad, clip_gradient;
  float momentum;                 /* sgd_mom, nag_mom */
  float beta1, beta2;             /* adam, lamb */
  float epsilon;                  /* adam, rmsprop, rmspropalex, adagrad, lamb */
  float gamma1, gamma2;           /* rmsprop, rmspropalex; gamma2: rmspropalex */
  float clip_weights;             /* rmsprop, rmspropalex */
  int32_t t;                      /* lamb */
  int32_t bias_correction;        /* lamb */
  float lower_bound, upper_bound; /* lamb */
} mxp_optim_params;

/* The arrays of one update. For mxp_optim_update_raw the pointers are
 * float32 data of `size` elements each; for mxp_optim_update_mxnet they are
 * NDArrayHandles and `size` is ignored (taken from the arrays). */
typedef struct {
  void* weight;              /* updated in place */
  void* grad;                /* read only */
  void* states[3];           /* the op's states in its order (sgd_mom: mom; adam: mean, var ...) */
  int32_t num_states;
  int64_t size;
  const int64_t* offsets;    /* NULL, or num_segments + 1 tensor offsets (LAMB norms) */
  int64_t num_segments;
} mxp_optim_buffers;

/* Fills *out with the defaults of `kind` (the MXNet op's; lr = 0). */
int mxp_optim_default_params(int32_t kind, mxp_optim_params* out);
/* Sets the field `name` of params->kind; InvalidArgument (listing the valid
 * names) when that optimizer has no such field. */
int mxp_optim_set_param(mxp_optim_params* params, const char* name, double value);
/* Number of state buffers of `kind`. */
int mxp_optim_num_states(int32_t kind, int32_t* out);
/* How many fused optimizers there are, and the name of each ("sgd_mom", ...):
 * the binding builds its table from these, so no list is kept by hand. */
int mxp_optim_num_kinds(int32_t* out);
int mxp_optim_kind_name(int32_t kind, const char** out);

/* Runs the update now, on the calling thread. */
int mxp_optim_update_raw(const mxp_optim_params* params, const mxp_optim_buffers* buffers);
/* Pushes one op to MXNet's engine that runs the update once grad is ready:
 * weight and states are written, grad read. Arrays: float32, default
 * storage, CPU, equal sizes; checked before anything is pushed. */
int mxp_optim_update_mxnet(const mxp_optim_params* params, const mxp_optim_buffers* buffers, int32_t priority);
/* Weights as separate NDArrays (one per segment: buffers->offsets has
 * num_weights + 1 entries), grad and states flat (buffers->weight unused). */
int mxp_optim_update_mxnet_multi(const mxp_optim_params* params, void* const* weights, int32_t num_weights,
                                 const mxp_optim_buffers* buffers, int32_t priority);

#ifdef __cplusplus
}
#endif

#endif /* MXPLUGIN_C_API_OPTIM_H_ */
