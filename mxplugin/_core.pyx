# cython: boundscheck=False, wraparound=False
"""Binding over the C API. The one place where core errors become Python
exceptions (see _raise). Its parts: the codes, errors, the process's end,
MemoryJob and Core here; the op records in _core_ops.pxi, the fused
optimizer updates in _core_optim.pxi, PowerSGD's passes in _core_powersgd.pxi, the CUDA kernels in _core_cuda.pxi."""
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from mxplugin.errors import (ArgumentError, MXPluginError, MismatchError, PeerFailureError,
                             NotInitializedError)

# The shared codes, re-exported from their one definition (src/common/codes.h).
OP_ALLREDUCE = MXP_OP_ALLREDUCE
OP_ALLGATHER = MXP_OP_ALLGATHER
OP_BROADCAST = MXP_OP_BROADCAST
OP_ALLTOALL = MXP_OP_ALLTOALL
OP_REDUCESCATTER = MXP_OP_REDUCESCATTER
OP_BARRIER = MXP_OP_BARRIER
OP_REFUSAL = MXP_OP_REFUSAL
OP_JOIN = MXP_OP_JOIN
REDUCE_SUM = MXP_REDUCE_SUM
REDUCE_AVERAGE = MXP_REDUCE_AVERAGE
REDUCE_MIN = MXP_REDUCE_MIN
REDUCE_MAX = MXP_REDUCE_MAX
REDUCE_PRODUCT = MXP_REDUCE_PRODUCT
DTYPES = {"uint8": MXP_DTYPE_UINT8, "int8": MXP_DTYPE_INT8, "int32": MXP_DTYPE_INT32, "int64": MXP_DTYPE_INT64,
          "float16": MXP_DTYPE_FLOAT16, "float32": MXP_DTYPE_FLOAT32, "float64": MXP_DTYPE_FLOAT64,
          "bfloat16": MXP_DTYPE_BFLOAT16}
CPU_DEVICE = MXP_CPU_DEVICE
FUSION_ALIGNMENT_BYTES = MXP_FUSION_ALIGNMENT_BYTES
FENCE_PREFIX = MXP_FENCE_PREFIX.decode()


cdef _raise(int code):
    message = mxp_last_error().decode("utf-8", "replace")
    if code == MXP_STATUS_INVALID_ARGUMENT:
        raise ArgumentError(message)
    if code == MXP_STATUS_MISMATCH:
        raise MismatchError(message)
    if code == MXP_STATUS_ABORTED:
        raise PeerFailureError(message)
    if code == MXP_STATUS_NOT_INITIALIZED:
        raise NotInitializedError(message)
    if code == MXP_STATUS_WRONG_TYPE:
        raise TypeError(message)
    raise MXPluginError(message)


cdef inline int _check(int code) except -1:
    if code != MXP_STATUS_OK:
        _raise(code)
    return 0


def cuda_built():
    return bool(mxp_cuda_built())


def nccl_built():
    return int(mxp_nccl_built())


cdef extern from "Python.h":
    int Py_AtExit(void (*func)() noexcept)

cdef extern from "stdlib.h" nogil:
    void _c_exit "exit"(int status)

cdef int _status_at_end = -1


cdef void _exit_with_status_at_end() noexcept nogil:
    if _status_at_end >= 0:
        _c_exit(_status_at_end)


def exit_at_end(int status):
    """Makes the process end with exit(`status`) once the interpreter has
    finalised (Py_AtExit), rather than as it would have (an interpreter
    stopped by a KeyboardInterrupt kills itself with SIGINT there). C exit
    handlers run as after any exit(). Note [Interrupted ranks end with a
    code] in basics.py. False if no slot for it was left."""
    global _status_at_end
    if _status_at_end < 0 and Py_AtExit(_exit_with_status_at_end) != 0:
        return False
    _status_at_end = status
    return True


include "_core_ops.pxi"


cdef class MemoryJob:
    """Tests: `size` ranks as threads of this process, meeting in memory
    (src/backend/memory); `ranks_per_host` ranks per pretend host (0: one host).
    Make each rank's Core(job=..., rank=...) from its own thread."""
    cdef mxp_memory_job* j
    cdef readonly int size

    def __cinit__(self, int size, int ranks_per_host=0):
        _check(mxp_memory_job_create(size, ranks_per_host, &self.j))
        self.size = size

    def __dealloc__(self):
        if self.j != NULL:
            mxp_memory_job_destroy(self.j)

    def negotiation_counts(self):
        """(rounds, full_rounds): negotiation rounds of every process set so
        far, and those that gathered full requests (not all cached)."""
        cdef int64_t rounds = 0, full = 0
        _check(mxp_memory_job_counts(self.j, &rounds, &full))
        return rounds, full

    def reduction_calls(self):
        """Data-plane allreduce calls of every group so far: a fused or
        batched group of allreduces is one."""
        cdef int64_t calls = 0
        _check(mxp_memory_job_reductions(self.j, &calls))
        return calls

    def kill(self, int rank):
        """The rank acts as a dead process from now on."""
        _check(mxp_memory_job_kill(self.j, rank))


cdef int _array_op(mxp_op* o, int op_type, tensor, output, const char* name, const char* group, int reduce_op,
                   double prescale, double postscale, int priority, int root_rank) except -1:
    """Fills `o` (zeroed: no shapes, splits or stream) for NDArray `tensor`
    -> `output` (None: the adapter makes it), whose dtype, shape and device
    the adapter reads from the array; `name` and `group` must outlive the call."""
    o.name = name
    o.group = group
    o.op_type = op_type
    o.reduce_op = reduce_op
    o.dtype = MXP_DTYPE_OF_ARRAY
    o.device = MXP_CPU_DEVICE
    o.prescale = prescale
    o.postscale = postscale
    o.priority = priority
    o.root_rank = root_rank
    o.input = <void*><uintptr_t>tensor.handle.value
    o.output = NULL if output is None else <void*><uintptr_t>output.handle.value
    return 0


cdef class Core:
    """Owns the C++ core: this process's rank of the MPI job, or with `job`,
    rank `rank` of an in-memory job (tests; several per process)."""
    cdef mxp_core* c

    def __cinit__(self, MemoryJob job=None, int rank=0):
        cdef int rc
        cdef mxp_memory_job* j = NULL
        if job is None:
            with nogil:
                rc = mxp_core_create(&self.c)
        else:
            j = job.j
            with nogil:
                rc = mxp_core_create_in_memory(j, rank, &self.c)
        _check(rc)

    def __dealloc__(self):
        if self.c != NULL:
            with nogil:
                mxp_core_destroy(self.c)

    def shutdown(self):
        cdef int rc
        with nogil:
            rc = mxp_core_shutdown(self.c)
        _check(rc)

    def topology(self):
        cdef mxp_topology t
        _check(mxp_core_topology(self.c, &t))
        return dict(rank=t.rank, size=t.size, local_rank=t.local_rank, local_size=t.local_size,
                    cross_rank=t.cross_rank, cross_size=t.cross_size,
                    threads_multiple=bool(t.threads_multiple))

    def stuck_transfer(self):
        """Why the data plane is stuck with peers out of reach, or "" (Note
        [Stuck transfers] in src/core/transfer_watchdog.h)."""
        cdef char text[2048]
        _check(mxp_core_stuck_transfer(self.c, text, sizeof(text)))
        return text.decode(errors="replace")

    def keep_running_when_stuck(self):
        """Report a stuck data plane (stuck_transfer()) rather than end the process."""
        _check(mxp_core_keep_running_when_stuck(self.c))

    def say_lost_peers(self, marker):
        """From now on a line beginning with `marker` names the peers this
        rank lost, as fields (Note [Lost peers as data] in
        src/core/lost_peer_report.h)."""
        _check(mxp_core_say_lost_peers(self.c, marker.encode()))

    def failed_for_peers(self):
        """Whether the last request that failed here failed for its peers
        (lost, stopped, or leaving: the status PeerFailureError stands for),
        for errors that reach Python as the framework's, message only."""
        cdef int32_t code = 0
        _check(mxp_core_last_failure(self.c, &code))
        return code == MXP_STATUS_ABORTED

    def begin_push_batch(self):
        """Note [Diverged pushes] (src/core/diverged_pushes.cc): the
        collectives this thread pushes until the matching end_push_batch()
        (a trainer's step) share one stamp, so that a fence this rank went
        on without fails all of them."""
        _check(mxp_core_begin_push_batch(self.c))

    def end_push_batch(self):
        """Ends the batch begin_push_batch() opened on this thread (nothing
        when none is open)."""
        _check(mxp_core_end_push_batch(self.c))

    def leave_world(self, double seconds):
        """Note [Leaving a broken world] (src/backend/leaving.h): this rank's
        core makes no MPI call from now on, and its thread parks; pending and
        later ops fail. Whether the thread parked within `seconds`. Only for
        a process about to end."""
        cdef int32_t parked = 0
        cdef int rc
        with nogil:
            rc = mxp_core_leave_world(self.c, seconds, &parked)
        _check(rc)
        return bool(parked)

    def add_process_set(self, ranks):
        cdef int n = len(ranks)
        cdef int32_t* r = <int32_t*>malloc(max(n, 1) * sizeof(int32_t))
        cdef int32_t new_id = -1
        cdef int rc, i
        for i in range(n):
            r[i] = ranks[i]
        with nogil:
            rc = mxp_add_process_set(self.c, r, n, &new_id)
        free(r)
        _check(rc)
        return new_id

    def remove_process_set(self, int set_id):
        cdef int32_t removed = 0
        cdef int rc
        with nogil:
            rc = mxp_remove_process_set(self.c, set_id, &removed)
        _check(rc)
        return bool(removed)

    def process_set_ranks(self, int set_id):
        cdef int32_t n = 0
        _check(mxp_process_set_ranks(self.c, set_id, NULL, 0, &n))
        cdef int32_t* r = <int32_t*>malloc(max(n, 1) * sizeof(int32_t))
        rc = mxp_process_set_ranks(self.c, set_id, r, n, &n)
        out = [r[i] for i in range(n)]
        free(r)
        _check(rc)
        return out

    def process_set_rank(self, int set_id):
        cdef int32_t rank = -1
        _check(mxp_process_set_rank(self.c, set_id, &rank))
        return rank

    def reference_allreduce(self, uintptr_t data, int64_t count, int dtype):
        """Benchmark reference: plain in-place MPI sum of `count` elements at
        `data` on the background thread; returns the MPI call's seconds."""
        cdef double seconds = 0
        cdef int rc
        with nogil:
            rc = mxp_reference_allreduce(self.c, <void*>data, count, dtype, &seconds)
        _check(rc)
        return seconds

    def start_timeline(self, str path, bint mark_cycles=False):
        _check(mxp_start_timeline(self.c, path.encode(), mark_cycles))

    def stop_timeline(self):
        _check(mxp_stop_timeline(self.c))

    def enqueue(self, list ops, int process_set_id, bint mxnet=False, int priority=0, group=None):
        """ops: Op records, one call's group (input/output are data pointers
        for the raw entry, NDArrayHandles with mxnet=True). group: the name
        the call is negotiated under (the user's name; None: each op's own
        name), so that ranks calling different collectives or groups of
        different sizes under one name get a mismatch, not a stall.
        Returns a Handle for raw ops, None for MXNet ops (the engine tracks them)."""
        cdef int n = len(ops)
        cdef _OpBatch batch = _OpBatch(n)
        cdef int i
        cdef Handle handle
        cdef int rc
        cdef const char* group_ptr = batch.text(group)
        for i in range(n):
            if not isinstance(ops[i], Op):
                raise TypeError(f"enqueue takes Op records, got {type(ops[i]).__name__} at position {i}")
            batch.set(i, <Op>ops[i], group_ptr)
        if mxnet:
            _check(mxp_mxnet_enqueue(self.c, batch.ops, n, process_set_id, priority, NULL))
            return None
        handle = Handle()
        _check(mxp_enqueue_raw(self.c, batch.ops, n, process_set_id, &handle.h))
        return handle

    def enqueue_mxnet_arrays(self, int op_type, list inputs, list outputs, list names, int reduce_op,
                             double prescale, double postscale, int process_set_id, int priority, group,
                             int root_rank=0):
        """One call's group of NDArrays, inputs[i] -> outputs[i] of the same
        shape (allreduce, or broadcast from global rank root_rank), or
        outputs[i] None for a reducescatter, whose output (this rank's
        block) the adapter makes: returns those new arrays' handles (ints
        the caller owns; 0 where an output was given). Pushed as one engine
        op. The MXNet adapter reads each dtype and shape from the array
        (MXP_DTYPE_OF_ARRAY): reading them here, through MXNet's Python API,
        costs several microseconds a tensor, which a step with hundreds of
        gradients pays every time."""
        cdef int n = len(inputs)
        if len(outputs) != n or len(names) != n:
            raise ArgumentError(f"enqueue_mxnet_arrays: {n} inputs, {len(outputs)} outputs, {len(names)} names")
        cdef _OpBatch batch = _OpBatch(n)
        cdef bytes name
        cdef int i
        cdef const char* group_ptr = batch.text(group)
        for i in range(n):
            name = (<str>names[i]).encode()
            batch.keep.append(name)
            _array_op(&batch.ops[i], op_type, inputs[i], outputs[i], name, group_ptr, reduce_op, prescale, postscale,
                      priority, root_rank)
        if op_type != MXP_OP_REDUCESCATTER:
            _check(mxp_mxnet_enqueue(self.c, batch.ops, n, process_set_id, priority, NULL))
            return None
        cdef void** made = <void**>calloc(max(n, 1), sizeof(void*))
        try:
            _check(mxp_mxnet_enqueue(self.c, batch.ops, n, process_set_id, priority, made))
            return [<uintptr_t>made[i] for i in range(n)]
        finally:
            free(made)

    def enqueue_mxnet_array(self, int op_type, tensor, output, str name, int reduce_op, double prescale,
                            double postscale, int priority, str group, int root_rank=0):
        """enqueue_mxnet_arrays of one NDArray on the global process set,
        with no records of a group to build (the plain calls of
        mxplugin/plain_calls.py): output None for a reducescatter, whose new
        array's handle it returns (an int the caller owns); 0 otherwise."""
        cdef mxp_op o
        memset(&o, 0, sizeof(o))
        cdef bytes name_bytes = name.encode()
        cdef bytes group_bytes = group.encode()
        _array_op(&o, op_type, tensor, output, name_bytes, group_bytes, reduce_op, prescale, postscale, priority,
                  root_rank)
        cdef void* made = NULL
        _check(mxp_mxnet_enqueue(self.c, &o, 1, 0, priority, &made if output is None else NULL))
        return <uintptr_t>made


include "_core_exchange.pxi"
include "_core_optim.pxi"
include "_core_powersgd.pxi"
include "_core_cuda.pxi"


def grads_bound(weights, grads):
    """For each pair, whether the gradient autograd holds for weights[i]
    (the array its last backward wrote) is grads[i]: same storage, offset and
    shape. NDArrays; reads bookkeeping only (no data, no engine wait)."""
    cdef int32_t n = len(weights)
    if len(grads) != n:
        raise ArgumentError(f"grads_bound: {n} weights but {len(grads)} gradients")
    cdef void** w = <void**>malloc(max(n, 1) * sizeof(void*))
    cdef void** g = <void**>malloc(max(n, 1) * sizeof(void*))
    cdef int32_t* out = <int32_t*>malloc(max(n, 1) * sizeof(int32_t))
    cdef int rc
    try:
        for i in range(n):
            w[i] = <void*>_ndarray_handle(weights[i], f"weight {i}")
            g[i] = <void*>_ndarray_handle(grads[i], f"gradient {i}")
        with nogil:
            rc = mxp_mxnet_grads_bound(w, g, n, out)
        _check(rc)
        return [bool(out[i]) for i in range(n)]
    finally:
        free(w)
        free(g)
        free(out)
