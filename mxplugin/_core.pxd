# Declarations of the C API (src/c_api.h) only.
from libc.stdint cimport int32_t, int64_t

cdef extern from "common/codes.h":
    # The one definition of every shared code (src/common/codes.h).
    ctypedef enum mxp_dtype:
        MXP_DTYPE_UINT8, MXP_DTYPE_INT8, MXP_DTYPE_INT32, MXP_DTYPE_INT64, MXP_DTYPE_FLOAT16,
        MXP_DTYPE_FLOAT32, MXP_DTYPE_FLOAT64, MXP_DTYPE_BFLOAT16, MXP_NUM_DTYPES
    ctypedef enum mxp_reduce_op:
        MXP_REDUCE_SUM, MXP_REDUCE_AVERAGE, MXP_REDUCE_MIN, MXP_REDUCE_MAX, MXP_REDUCE_PRODUCT
    ctypedef enum mxp_op_type:
        MXP_OP_ALLREDUCE, MXP_OP_ALLGATHER, MXP_OP_BROADCAST, MXP_OP_ALLTOALL, MXP_OP_REDUCESCATTER,
        MXP_OP_BARRIER, MXP_OP_REFUSAL, MXP_OP_JOIN
    ctypedef enum mxp_status:
        MXP_STATUS_OK, MXP_STATUS_INVALID_ARGUMENT, MXP_STATUS_MISMATCH, MXP_STATUS_ABORTED,
        MXP_STATUS_INTERNAL, MXP_STATUS_NOT_INITIALIZED, MXP_STATUS_WRONG_TYPE
    int MXP_CPU_DEVICE
    int MXP_DTYPE_OF_ARRAY
    int MXP_FUSION_ALIGNMENT_BYTES
    const char* MXP_FENCE_PREFIX


cdef extern from "c_api.h" nogil:
    ctypedef struct mxp_core:
        pass
    ctypedef struct mxp_handle:
        pass
    ctypedef struct mxp_memory_job:
        pass
    ctypedef struct mxp_op:
        const char* name
        int32_t op_type
        int32_t reduce_op
        int32_t dtype
        int32_t device
        int32_t ndim
        const int64_t* shape
        int32_t out_ndim
        const int64_t* out_shape
        int32_t root_rank
        double prescale
        double postscale
        int32_t nsplits
        const int64_t* splits
        int32_t priority
        void* input
        void* output
        void* stream
        const char* group
        int32_t zeros_when_joined
    ctypedef struct mxp_topology:
        int32_t rank, size, local_rank, local_size, cross_rank, cross_size, threads_multiple

    const char* mxp_last_error()
    int mxp_core_create(mxp_core** out)
    int mxp_memory_job_create(int32_t size, int32_t ranks_per_host, mxp_memory_job** out)
    int mxp_memory_job_kill(mxp_memory_job* job, int32_t rank)
    int mxp_memory_job_counts(mxp_memory_job* job, int64_t* rounds, int64_t* full_rounds)
    int mxp_memory_job_reductions(mxp_memory_job* job, int64_t* calls)
    void mxp_memory_job_destroy(mxp_memory_job* job)
    int mxp_core_create_in_memory(mxp_memory_job* job, int32_t rank, mxp_core** out)
    int mxp_core_shutdown(mxp_core* core)
    void mxp_core_destroy(mxp_core* core)
    int mxp_core_topology(mxp_core* core, mxp_topology* out)
    int mxp_core_stuck_transfer(mxp_core* core, char* text, int32_t capacity)
    int mxp_core_keep_running_when_stuck(mxp_core* core)
    int mxp_core_say_lost_peers(mxp_core* core, const char* marker)
    int mxp_core_last_failure(mxp_core* core, int32_t* code)
    int mxp_core_begin_push_batch(mxp_core* core)
    int mxp_core_end_push_batch(mxp_core* core)
    int mxp_core_leave_world(mxp_core* core, double seconds, int32_t* parked)
    int mxp_add_process_set(mxp_core* core, const int32_t* ranks, int32_t n, int32_t* id)
    int mxp_remove_process_set(mxp_core* core, int32_t id, int32_t* removed)
    int mxp_process_set_ranks(mxp_core* core, int32_t id, int32_t* ranks, int32_t capacity, int32_t* n)
    int mxp_process_set_rank(mxp_core* core, int32_t id, int32_t* rank)
    int mxp_reference_allreduce(mxp_core* core, void* data, int64_t count, int32_t dtype, double* seconds)
    int mxp_start_timeline(mxp_core* core, const char* path, int32_t mark_cycles)
    int mxp_stop_timeline(mxp_core* core)
    int mxp_enqueue_raw(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, mxp_handle** out)
    int mxp_handle_done(mxp_handle* handle, int32_t* done)
    int mxp_handle_wait(mxp_handle* handle)
    int mxp_handle_output(mxp_handle* handle, int32_t index, const void** data, int64_t* nbytes, int64_t* rows)
    void mxp_handle_free(mxp_handle* handle)
    int mxp_mxnet_enqueue(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, int32_t priority,
                          void** made)
    int mxp_mxnet_exchange_host(mxp_core* core, const mxp_op* ops, int32_t n, int32_t process_set_id, void** outputs,
                                int64_t* from_each, int32_t set_size, int64_t* total_bytes, int32_t* declined)
    int mxp_mxnet_grads_bound(void* const* weights, void* const* grads, int32_t n, int32_t* out)
    int mxp_cuda_built()
    int mxp_nccl_built()


# --- fused optimizer kernels (src/c_api_optim.h)

cdef extern from "c_api_optim.h" nogil:
    ctypedef struct mxp_optim_params:
        int32_t kind
    ctypedef struct mxp_optim_buffers:
        void* weight
        void* grad
        void* states[3]
        int32_t num_states
        int64_t size
        const int64_t* offsets
        int64_t num_segments

    int mxp_optim_default_params(int32_t kind, mxp_optim_params* out)
    int mxp_optim_set_param(mxp_optim_params* params, const char* name, double value)
    int mxp_optim_num_states(int32_t kind, int32_t* out)
    int mxp_optim_num_kinds(int32_t* out)
    int mxp_optim_kind_name(int32_t kind, const char** out)
    int mxp_optim_update_raw(const mxp_optim_params* params, const mxp_optim_buffers* buffers)
    int mxp_optim_update_mxnet_multi(const mxp_optim_params* params, void* const* weights, int32_t num_weights,
                                     const mxp_optim_buffers* buffers, int32_t priority)
    int mxp_optim_update_mxnet(const mxp_optim_params* params, const mxp_optim_buffers* buffers,
                               int32_t priority)


# --- PowerSGD's passes (src/c_api_powersgd.h)

cdef extern from "c_api_powersgd.h" nogil:
    ctypedef struct mxp_powersgd_matrix:
        void* grad
        void* error
        void* p
        void* q
        int64_t m
        int64_t n
        int32_t rank

    int mxp_powersgd_num_stages(int32_t* out)
    int mxp_powersgd_stage_raw(int32_t stage, const mxp_powersgd_matrix* matrices, int32_t count)
    int mxp_powersgd_stage_mxnet(int32_t stage, const mxp_powersgd_matrix* matrices, int32_t count,
                                 int32_t priority)


# --- CUDA kernels (raw device pointers)

cdef extern from "c_api_cuda.h" nogil:
    ctypedef struct mxp_cuda_copy:
        const void* src
        void* dst
        int64_t count
        double scale

    int mxp_cuda_device_count(int32_t* out)
    int mxp_cuda_scale(void* data, int64_t count, int32_t dtype, double factor, void* stream)
    int mxp_cuda_copy_and_scale(void* dst, const void* src, int64_t count, int32_t dtype, double factor,
                                void* stream)
    int mxp_cuda_batched_copy(const mxp_cuda_copy* copies, int32_t n, int32_t dtype, void* stream)
    int mxp_cuda_synchronize(void* stream)
