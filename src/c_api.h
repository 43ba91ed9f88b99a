/* The C surface of the core, used by the Cython binding. Every function
 * returns MXP_STATUS_OK (0) on success or another mxp_status;
 * mxp_last_error() then holds the message (per thread). */
#ifndef MXPLUGIN_C_API_H_
#define MXPLUGIN_C_API_H_

#include <stdint.h>

#include "common/codes.h" /* mxp_dtype, mxp_reduce_op, mxp_op_type, mxp_status */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_core mxp_core;
typedef struct mxp_handle mxp_handle;
typedef struct mxp_memory_job mxp_memory_job;

/* One tensor of a collective. For mxp_enqueue_raw, input/output are data
 * pointers; for mxp_mxnet_enqueue they are NDArrayHandles. */
typedef struct {
  const char* name;
  int32_t op_type;   /* mxp_op_type */
  int32_t reduce_op; /* mxp_reduce_op */
  int32_t dtype;     /* mxp_dtype */
  int32_t device;    /* MXP_CPU_DEVICE, or a CUDA device id */
  int32_t ndim;
  const int64_t* shape;
  int32_t out_ndim;
  const int64_t* out_shape;
  int32_t root_rank; /* global rank */
  double prescale;
  double postscale;
  int32_t nsplits;
  const int64_t* splits;
  int32_t priority;
  void* input;
  void* output;
  /* GPU tensors (device >= 0): the cudaStream_t on which the input was
   * produced (NULL: the legacy default stream). The core makes its own
   * streams wait for the work queued there so far, through an event recorded
   * during the enqueue call; ignored for CPU tensors and by mxp_mxnet_enqueue,
   * which takes the engine's stream. */
  void* stream;
  /* The name ranks negotiate the call under: what the user named it (NULL:
   * `name`). Ranks that submit different collectives, or groups of
   * different sizes, under one group name get a mismatch error, not a stall.
   * Every op of one enqueue call is one group. */
  const char* group;
  /* allgather: what a rank that has joined (MXP_OP_JOIN) contributes: 0, no
   * rows (Horovod's meaning); 1, zeros of this op's shape, for exchanges
   * whose output has a row per rank (the sizes before an allgather). */
  int32_t zeros_when_joined;
} mxp_op;

typedef struct {
  int32_t rank, size, local_rank, local_size, cross_rank, cross_size, threads_multiple;
} mxp_topology;

const char* mxp_last_error(void);
/* Records `message` as this thread's mxp_last_error() and returns `code`:
 * how the other C API files (c_api_optim.cc) report errors. */
int mxp_set_last_error(int code, const char* message);

/* This process's rank of the job mxplugin-run (mpiexec) started (MPI). */
int mxp_core_create(mxp_core** out);

/* Tests: `size` ranks as threads of this process, meeting in memory
 * (src/backend/memory). ranks_per_host <= 0 puts them all on one host.
 * mxp_core_create_in_memory makes rank `rank`'s core; it returns once every
 * rank's core is being made, so call it for each rank from its own thread.
 * mxp_memory_job_kill makes a rank act as a dead process. The job may be
 * destroyed while its cores live. */
int mxp_memory_job_create(int32_t size, int32_t ranks_per_host, mxp_memory_job** out);
int mxp_memory_job_kill(mxp_memory_job* job, int32_t rank);
/* Negotiation so far: rounds (bit allreduces) and rounds that gathered full
 * requests at the coordinator (those whose requests were not all cached). */
int mxp_memory_job_counts(mxp_memory_job* job, int64_t* rounds, int64_t* full_rounds);
/* Data-plane allreduce calls so far (a fused or batched group is one). */
int mxp_memory_job_reductions(mxp_memory_job* job, int64_t* calls);
void mxp_memory_job_destroy(mxp_memory_job* job);
int mxp_core_create_in_memory(mxp_memory_job* job, int32_t rank, mxp_core** out);
int mxp_core_shutdown(mxp_core* core);
void mxp_core_destroy(mxp_core* core);
int mxp_core_topology(mxp_core* core, mxp_topology* out);
/* Note [Stuck transfers]: why the data plane is stuck with peers out of
 * reach, into `text` (at most `capacity` bytes with the NUL; "" while it is
 * not); and the choice to be told that rather than have the process ended. */
int mxp_core_stuck_transfer(mxp_core* core, char* text, int32_t capacity);
int mxp_core_keep_running_when_stuck(mxp_core* core);
/* Note [Lost peers as data] (src/core/lost_peer_report.h): from now on a
 * line beginning with `marker` names, as fields, the peers this rank lost. */
int mxp_core_say_lost_peers(mxp_core* core, const char* marker);
/* The status code of the last request that failed on this rank
 * (MXP_STATUS_OK while none has), for errors a framework kept only the
 * message of. */
int mxp_core_last_failure(mxp_core* core, int32_t* code);
/* Note [Diverged pushes] (src/core/diverged_pushes.cc): the collectives pushed between
 * these two calls (a trainer's step) share one stamp. */
int mxp_core_begin_push_batch(mxp_core* core);
int mxp_core_end_push_batch(mxp_core* core);
/* Note [Leaving a broken world] (src/backend/leaving.h): no more calls of
 * this rank's planes; *parked: whether the core's thread parked within
 * `seconds`. */
int mxp_core_leave_world(mxp_core* core, double seconds, int32_t* parked);

int mxp_add_process_set(mxp_core* core, const int32_t* ranks, int32_t n, int32_t* id);
int mxp_remove_process_set(mxp_core* core, int32_t id, int32_t* removed);
/* Writes up to `capacity` ranks; *n receives the set's size. */
int mxp_process_set_ranks(mxp_core* core, int32_t id, int32_t* ranks, int32_t capacity, int32_t* n);
int mxp_process_set_rank(mxp_core* core, int32_t id, int32_t* rank);

/* Benchmark reference: plain in-place sum of the world's data plane (MPI)
 * on the background thread; *seconds: the call's duration. Collective. */
int mxp_reference_allreduce(mxp_core* core, void* data, int64_t count, int32_t dtype, double* seconds);

int mxp_start_timeline(mxp_core* core, const char* path, int32_t mark_cycles);
int mxp_stop_timeline(mxp_core* core);

/* Framework-neutral entry: raw pointers (host, or device in GPU builds). */
int mxp_enqueue_raw(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, mxp_handle** out);
int mxp_handle_done(mxp_handle* handle, int32_t* done);
/* Blocks until done; returns the op's status code (message in mxp_last_error). */
int mxp_handle_wait(mxp_handle* handle);
/* An allgather enqueued raw with a NULL output has its output sized and
 * held by the core (Note [Outputs the core sizes] in src/core/sized_output.cc):
 * after the call finished, op `index`'s bytes and rows (its first dimension),
 * valid until the handle is freed. */
int mxp_handle_output(mxp_handle* handle, int32_t index, const void** data, int64_t* bytes, int64_t* rows);
void mxp_handle_free(mxp_handle* handle);

/* MXNet entry: pushes one engine op for the group. An op whose dtype is
 * MXP_DTYPE_OF_ARRAY takes dtype and shape from its input NDArray (shape and
 * out_shape are then ignored); an unsupported dtype is MXP_STATUS_WRONG_TYPE.
 * A reducescatter of that kind may have output NULL: made[i] is then a new
 * NDArrayHandle the caller owns, holding this rank's block when the op has
 * run (made: n entries, NULL where the output was given; made may be NULL
 * when every output is given). */
int mxp_mxnet_enqueue(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, int32_t priority,
                      void** made);

/* MXNet entry, blocking (Note [Host exchanges in one call] in
 * src/mxnet/host_exchange.cc): allgathers, or alltoalls (splits set, or
 * none for equal blocks), of host NDArrays ops[i].input (dtype, shape and
 * out_shape are read from the array, output is ignored) on a process set of
 * set_size ranks; on success outputs[i] is a new NDArrayHandle the caller
 * owns holding what this rank received, from_each[i * set_size + r] the
 * rows rank r of the set sent it for op i, and total_bytes the bytes of the
 * whole exchange (every rank's rows: the same on every rank), set on a
 * failure too where the exchange took place (-1 where it did not).
 * *declined = 1, with nothing submitted and nothing else set, where the
 * path does not take the call (an input that is not a dense host array of
 * at least one dimension and a supported dtype, or splits that do not cover
 * its rows): the caller takes its engine path, which checks the arguments.
 * Call it without holding a lock the background thread needs. */
int mxp_mxnet_exchange_host(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, void** outputs,
                            int64_t* from_each, int32_t set_size, int64_t* total_bytes, int32_t* declined);

/* For each i, out[i] = 1 when the gradient autograd holds for weights[i]
 * (the array its last backward wrote) is grads[i] (same storage, offset and
 * shape), else 0. NDArrayHandles; reads no data. */
int mxp_mxnet_grads_bound(void* const* weights, void* const* grads, int32_t n, int32_t* out);

/* What was compiled in. */
int mxp_cuda_built(void);
int mxp_nccl_built(void);

#ifdef __cplusplus
}
#endif

#endif  /* MXPLUGIN_C_API_H_ */
