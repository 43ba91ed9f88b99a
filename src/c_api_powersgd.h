/* The C surface of PowerSGD's passes (src/compress/powersgd.h), used by the
 * Cython binding. Conventions as in c_api.h: every function returns 0 on
 * success or a StatusCode, and mxp_last_error() then holds the message. */
#ifndef MXPLUGIN_C_API_POWERSGD_H_
#define MXPLUGIN_C_API_POWERSGD_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One gradient's matrix. For mxp_powersgd_stage_raw the pointers are
 * float32 data (grad, error: m * n; p: rank * rows; q: rank * cols, rows
 * = min(m, n), cols = max(m, n)); for mxp_powersgd_stage_mxnet they are
 * NDArrayHandles of those sizes. */
typedef struct {
  void* grad;
  void* error;
  void* p;
  void* q;
  int64_t m, n;
  int32_t rank;
} mxp_powersgd_matrix;

/* Stages: 0 accumulate (error += grad; P from Q), 1 residual (Q from P;
 * error -= its product), 2 reconstruct (grad from P and Q). */
int mxp_powersgd_num_stages(int32_t* out);
/* Runs `stage` on `count` matrices now, on the calling thread. */
int mxp_powersgd_stage_raw(int32_t stage, const mxp_powersgd_matrix* matrices, int32_t count);
/* Pushes `stage` on `count` matrices as one op of MXNet's engine. */
int mxp_powersgd_stage_mxnet(int32_t stage, const mxp_powersgd_matrix* matrices, int32_t count, int32_t priority);

#ifdef __cplusplus
}
#endif

#endif  /* MXPLUGIN_C_API_POWERSGD_H_ */
