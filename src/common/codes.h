/* Every numeric code shared across languages, defined once, in C: the C
 * API exposes them (c_api.h includes this file), the C++ enums of
 * common/types.h and common/status.h take their values from them, and the
 * Cython binding declares them (_core.pxd) and re-exports them to Python. */
#ifndef MXPLUGIN_COMMON_CODES_H_
#define MXPLUGIN_COMMON_CODES_H_

typedef enum {
  MXP_DTYPE_UINT8 = 0,
  MXP_DTYPE_INT8 = 1,
  MXP_DTYPE_INT32 = 2,
  MXP_DTYPE_INT64 = 3,
  MXP_DTYPE_FLOAT16 = 4,
  MXP_DTYPE_FLOAT32 = 5,
  MXP_DTYPE_FLOAT64 = 6,
  MXP_DTYPE_BFLOAT16 = 7,
  MXP_NUM_DTYPES = 8
} mxp_dtype;

typedef enum {
  MXP_REDUCE_SUM = 0,
  MXP_REDUCE_AVERAGE = 1, /* the core turns it into a Sum with postscale 1/size */
  MXP_REDUCE_MIN = 2,
  MXP_REDUCE_MAX = 3,
  MXP_REDUCE_PRODUCT = 4
} mxp_reduce_op;

typedef enum {
  MXP_OP_ALLREDUCE = 0,
  MXP_OP_ALLGATHER = 1,
  MXP_OP_BROADCAST = 2,
  MXP_OP_ALLTOALL = 3,
  MXP_OP_REDUCESCATTER = 4,
  MXP_OP_BARRIER = 5,
  /* A call that raised an error on this rank before it was submitted: the
   * other ranks' call under the same name fails with it (Note [Refused
   * calls] in src/core/message_table.cc). Carries no tensor. */
  MXP_OP_REFUSAL = 6,
  /* This rank has run out of work (hvd.join): until every rank of the set
   * has joined, it takes part in the others' collectives with stand-ins
   * (Note [Joined ranks] in src/core/message_table.cc). Its output is one
   * int32, the global rank that joined last. */
  MXP_OP_JOIN = 7
} mxp_op_type;

/* What every C API function returns (0: success). */
typedef enum {
  MXP_STATUS_OK = 0,
  MXP_STATUS_INVALID_ARGUMENT = 1, /* user error found locally (bad shape, unknown op, ...) */
  MXP_STATUS_MISMATCH = 2,         /* ranks disagreed during negotiation */
  MXP_STATUS_ABORTED = 3,          /* shut down, or a peer died / timed out */
  MXP_STATUS_INTERNAL = 4,         /* MPI/CUDA failure or a bug */
  MXP_STATUS_NOT_INITIALIZED = 5,
  MXP_STATUS_WRONG_TYPE = 6        /* an argument of a type mxplugin cannot take (an unsupported dtype) */
} mxp_status;

/* The device of a host tensor (GPU tensors carry their CUDA device id). */
/* Names of barriers that are fences: calls every rank makes at the same
   point of its program, so a rank that goes on without one is a mistake
   found at once (Note [Fences] in src/core/message_conflicts.cc). */
#define MXP_FENCE_PREFIX "mxplugin.fence:"

/* Names of control requests (Note [Control requests] in src/core/request.h). */
#define MXP_CONTROL_PREFIX "mxplugin.control."

#define MXP_CPU_DEVICE (-1)

/* mxp_mxnet_enqueue and mxp_mxnet_exchange_host only, as an op's dtype: the
 * op's dtype and shape are its input NDArray's, read by the MXNet adapter
 * (an engine op's output must have the same shape: allreduce, broadcast).
 * Saves the binding reading them per tensor. */
#define MXP_DTYPE_OF_ARRAY (-1)

/* Every tensor's offset in a fusion buffer (CPU and GPU) is a multiple of
 * this many bytes: a cache line, and a multiple of the GPU kernels' 16-byte
 * vectors. Benchmarks lay out their buffers with it to measure the layout
 * the executors really produce. */
#define MXP_FUSION_ALIGNMENT_BYTES 64

#endif /* MXPLUGIN_COMMON_CODES_H_ */
