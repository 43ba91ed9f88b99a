# cython: boundscheck=False, wraparound=False
"""Binding over the C API. The one place where core errors become Python
exceptions (see _raise)."""
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset

from mxplugin.errors import (MXPluginError, MismatchError, PeerFailureError,
                             NotInitializedError)

# Must match src/common/types.h and src/common/status.h.
OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST, OP_ALLTOALL, OP_REDUCESCATTER, OP_BARRIER = range(6)
REDUCE_SUM, REDUCE_AVERAGE, REDUCE_MIN, REDUCE_MAX, REDUCE_PRODUCT = range(5)
DTYPES = {"uint8": 0, "int8": 1, "int32": 2, "int64": 3, "float16": 4,
          "float32": 5, "float64": 6, "bfloat16": 7}


cdef _raise(int code):
    message = mxp_last_error().decode("utf-8", "replace")
    if code == 1:
        raise ValueError(message)
    if code == 2:
        raise MismatchError(message)
    if code == 3:
        raise PeerFailureError(message)
    if code == 5:
        raise NotInitializedError(message)
    raise MXPluginError(message)


cdef inline int _check(int code) except -1:
    if code != 0:
        _raise(code)
    return 0


def cuda_built():
    return bool(mxp_cuda_built())


def nccl_built():
    return int(mxp_nccl_built())


cdef class _OpBatch:
    """C structs for a group of ops, kept alive for the duration of one call."""
    cdef mxp_op* ops
    cdef int n
    cdef list keep  # Python objects whose buffers the structs point into

    def __cinit__(self, int n):
        self.ops = <mxp_op*>malloc(max(n, 1) * sizeof(mxp_op))
        memset(self.ops, 0, max(n, 1) * sizeof(mxp_op))
        self.n = n
        self.keep = []

    def __dealloc__(self):
        if self.ops != NULL:
            free(self.ops)

    cdef int64_t* _ints(self, values):
        cdef int k = len(values)
        cdef bytearray buf = bytearray(max(k, 1) * 8)
        cdef int64_t* p = <int64_t*><char*>buf
        cdef int j
        for j in range(k):
            p[j] = values[j]
        self.keep.append(buf)
        return p

    cdef set(self, int i, bytes name, int op_type, int reduce_op, int dtype, int device,
             shape, out_shape, int root_rank, double prescale, double postscale, splits,
             int priority, uintptr_t inp, uintptr_t out):
        cdef mxp_op* o = &self.ops[i]
        self.keep.append(name)
        o.name = name
        o.op_type = op_type
        o.reduce_op = reduce_op
        o.dtype = dtype
        o.device = device
        o.ndim = len(shape)
        o.shape = self._ints(shape)
        o.out_ndim = len(out_shape)
        o.out_shape = self._ints(out_shape)
        o.root_rank = root_rank
        o.prescale = prescale
        o.postscale = postscale
        if splits is None:
            o.nsplits = 0
            o.splits = NULL
        else:
            o.nsplits = len(splits)
            o.splits = self._ints(splits)
        o.priority = priority
        o.input = <void*>inp
        o.output = <void*>out


cdef class Handle:
    """Completion of a group of raw-pointer ops."""
    cdef mxp_handle* h

    def __dealloc__(self):
        if self.h != NULL:
            with nogil:
                mxp_handle_free(self.h)

    def done(self):
        cdef int32_t d = 0
        mxp_handle_done(self.h, &d)
        return bool(d)

    def wait(self):
        cdef int rc
        with nogil:
            rc = mxp_handle_wait(self.h)
        _check(rc)


cdef class Core:
    """Owns the C++ core (one per process in practice; tests may build more)."""
    cdef mxp_core* c

    def __cinit__(self):
        cdef int rc
        with nogil:
            rc = mxp_core_create(&self.c)
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

    def start_timeline(self, str path, bint mark_cycles=False):
        _check(mxp_start_timeline(self.c, path.encode(), mark_cycles))

    def stop_timeline(self):
        _check(mxp_stop_timeline(self.c))

    def enqueue(self, list ops, int process_set_id, bint mxnet=False, int priority=0):
        """ops: tuples (name, op_type, reduce_op, dtype, device, shape, out_shape,
        root_rank, prescale, postscale, splits, priority, input, output) where
        input/output are data pointers (raw) or NDArrayHandles (mxnet=True).
        Returns a Handle for raw ops, None for MXNet ops (the engine tracks them)."""
        cdef int n = len(ops)
        cdef _OpBatch batch = _OpBatch(n)
        cdef int i
        cdef Handle handle
        cdef int rc
        for i in range(n):
            t = ops[i]
            batch.set(i, t[0].encode() if isinstance(t[0], str) else t[0], t[1], t[2], t[3], t[4],
                      t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13])
        if mxnet:
            _check(mxp_mxnet_enqueue(self.c, batch.ops, n, process_set_id, priority))
            return None
        handle = Handle()
        _check(mxp_enqueue_raw(self.c, batch.ops, n, process_set_id, &handle.h))
        return handle


# --- fused optimizer kernels
#
# One call updates a whole group of parameters stored back to back in one
# flat float32 buffer, with the arithmetic of MXNet 1.9.1's optimizer ops
# (src/optim/). Two entries: fused_update (NDArrays, one engine op) and
# fused_update_raw (NumPy arrays, runs now; for tests and tools).

import numpy as _np

# Must match src/optim/update.h (OptimizerKind). States, in order:
# sgd: none; sgd_mom, nag_mom: mom; adam, lamb: mean, var; rmsprop: n;
# rmspropalex: n, g, delta; adagrad: history.
FUSED_KINDS = {"sgd": 0, "sgd_mom": 1, "nag_mom": 2, "adam": 3, "rmsprop": 4,
               "rmspropalex": 5, "adagrad": 6, "lamb": 7}
# Parameters where None means "off" (MXNet's -1).
_FUSED_OFF_WHEN_NONE = ("clip_gradient", "clip_weights", "lower_bound", "upper_bound")


cdef int _fused_kind(kind) except -1:
    try:
        return FUSED_KINDS[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown fused optimizer {kind!r}; choose one of {', '.join(FUSED_KINDS)}") from None


cdef int _fused_params(kind, dict params, mxp_optim_params* out) except -1:
    cdef int32_t code = _fused_kind(kind)
    _check(mxp_optim_default_params(code, out))
    required = ("lr", "t") if kind == "lamb" else ("lr",)
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"fused {kind} needs {', '.join(missing)}")
    for name, value in params.items():
        if value is None and name in _FUSED_OFF_WHEN_NONE:
            value = -1.0
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"fused {kind} parameter {name!r} must be a number, got {value!r}") from None
        _check(mxp_optim_set_param(out, str(name).encode(), number))
    return 0


cdef class _FusedBuffers:
    """The C struct of one update plus the Python objects it points into."""
    cdef mxp_optim_buffers c
    cdef bytearray offsets

    cdef set_states(self, list pointers):
        cdef int s
        if len(pointers) > 3:
            raise ValueError(f"at most 3 optimizer states, got {len(pointers)}")
        self.c.num_states = len(pointers)
        for s in range(len(pointers)):
            self.c.states[s] = <void*><uintptr_t>pointers[s]

    cdef set_segments(self, segments):
        cdef int64_t* p
        cdef Py_ssize_t k, n
        if segments is None:
            self.c.offsets = NULL
            self.c.num_segments = 0
            return
        n = len(segments)
        if n < 2:
            raise ValueError("segments must hold at least two offsets (0 and the buffer size)")
        self.offsets = bytearray(n * 8)
        p = <int64_t*><char*>self.offsets
        for k in range(n):
            p[k] = int(segments[k])
        self.c.offsets = p
        self.c.num_segments = n - 1


cdef list _state_list(states):
    if states is None:
        return []
    if not isinstance(states, (list, tuple)):
        raise TypeError(f"states must be a list or tuple of arrays, got {type(states).__name__}")
    return list(states)


cdef uintptr_t _ndarray_handle(array, str role) except? 0:
    try:
        value = array.handle.value
    except AttributeError:
        raise TypeError(f"{role} must be an mxnet NDArray, got {type(array).__name__}") from None
    if value is None:
        raise ValueError(f"{role} is a null NDArray")
    return <uintptr_t>value


cdef uintptr_t _float32_data(array, str role, bint writable) except? 0:
    if not isinstance(array, _np.ndarray):
        raise TypeError(f"{role} must be a numpy.ndarray, got {type(array).__name__}")
    if array.dtype != _np.float32:
        raise TypeError(f"{role} has dtype {array.dtype}; fused updates take float32 only")
    if not array.flags.c_contiguous:
        raise ValueError(f"{role} is not C-contiguous")
    if writable and not array.flags.writeable:
        raise ValueError(f"{role} is read-only; it is updated in place")
    return <uintptr_t>array.ctypes.data


def fused_num_states(str kind):
    """Number of state arrays `kind` reads and updates (see FUSED_KINDS)."""
    cdef int32_t n = 0
    _check(mxp_optim_num_states(_fused_kind(kind), &n))
    return n


def fused_update(str kind, weight, grad, states, dict params, segments=None, int priority=0):
    """Updates `weight` and `states` (mxnet NDArrays) in place from `grad`, as
    one asynchronous op of MXNet's engine (like an MXNet optimizer op).

    kind: a key of FUSED_KINDS. states: list of the optimizer's state arrays
    in the op's order (None or [] for "sgd"). All arrays: float32, default
    storage, CPU, same number of elements, none a view of another.
    params: the MXNet op's keyword arguments -- lr (required), wd,
    rescale_grad, clip_gradient and per kind momentum; beta1, beta2, epsilon;
    gamma1, gamma2, clip_weights; t (required for lamb), bias_correction,
    lower_bound, upper_bound. Omitted ones take the op's defaults; None turns
    clip_gradient, clip_weights, lower_bound, upper_bound off. For "adam" lr is
    the op's (already bias-corrected) lr; for "adagrad" epsilon is AdaGrad's eps.
    segments: for "lamb", offsets [0, n1, n1+n2, ..., size] of the tensors laid
    out back to back (LAMB's norms are per tensor); None means one tensor.
    Other kinds accept but do not need it.
    priority: the engine's scheduling hint, as for MXNet ops.
    Raises ValueError/TypeError before anything is pushed; an error while
    running surfaces as MXNetError when weight or a state is read.
    """
    cdef mxp_optim_params p
    cdef _FusedBuffers b = _FusedBuffers()
    cdef int rc
    _fused_params(kind, params, &p)
    b.c.weight = <void*>_ndarray_handle(weight, "weight")
    b.c.grad = <void*>_ndarray_handle(grad, "grad")
    b.set_states([_ndarray_handle(s, f"state {i}") for i, s in enumerate(_state_list(states))])
    b.set_segments(segments)
    with nogil:
        rc = mxp_optim_update_mxnet(&p, &b.c, priority)
    _check(rc)


def fused_update_multi(str kind, weights, grad, states, dict params, segments, int priority=0):
    """fused_update for a trainer bucket: `weights` is a list of NDArrays
    (parameter i covers [segments[i], segments[i+1]) of the flat `grad` and
    `states`), updated in one engine op. Weights stay separate arrays (oneDNN
    may reorder them in place, which MXNet cannot do on views)."""
    cdef mxp_optim_params p
    cdef _FusedBuffers b = _FusedBuffers()
    cdef int rc
    cdef int n = len(weights)
    cdef void** handles = <void**>malloc(max(n, 1) * sizeof(void*))
    _fused_params(kind, params, &p)
    try:
        for i, w in enumerate(weights):
            handles[i] = <void*>_ndarray_handle(w, f"weight {i}")
        b.c.grad = <void*>_ndarray_handle(grad, "grad")
        b.set_states([_ndarray_handle(s, f"state {i}") for i, s in enumerate(_state_list(states))])
        b.set_segments(segments)
        with nogil:
            rc = mxp_optim_update_mxnet_multi(&p, handles, n, &b.c, priority)
    finally:
        free(handles)
    _check(rc)


def fused_update_raw(str kind, weight, grad, states, dict params, segments=None):
    """fused_update on NumPy arrays, run now on the calling thread (the GIL
    released). Arrays: float32, C-contiguous, same size; weight and states
    writable. Same kinds, params and segments as fused_update."""
    cdef mxp_optim_params p
    cdef _FusedBuffers b = _FusedBuffers()
    cdef int rc
    _fused_params(kind, params, &p)
    state_list = _state_list(states)
    arrays = [("weight", weight), ("grad", grad)] + [(f"state {i}", s) for i, s in enumerate(state_list)]
    b.c.weight = <void*>_float32_data(weight, "weight", True)
    b.c.grad = <void*>_float32_data(grad, "grad", False)
    b.set_states([_float32_data(s, f"state {i}", True) for i, s in enumerate(state_list)])
    for role, array in arrays[1:]:
        if array.size != weight.size:
            raise ValueError(f"{role} has {array.size} elements but weight has {weight.size}")
    b.c.size = weight.size
    b.set_segments(segments)
    with nogil:
        rc = mxp_optim_update_raw(&p, &b.c)
    _check(rc)


# --- CUDA kernels (raw device pointers)
#
# The CUDA scale and copy kernels (cuda/scale_kernels.h) on raw device
# pointers, so they can be driven without MXNet (from CuPy: array.data.ptr,
# stream.ptr). Pointers and streams are ints; counts are elements; dtype is a
# key of DTYPES or its code. The kernels are only enqueued on `stream` (0:
# the legacy default stream): synchronise it before reading the results.
# Arguments are checked before anything is launched (host pointers are a
# ValueError, not a fault); a build without CUDA, or a machine without a
# usable GPU, raises MXPluginError saying so.

cdef int32_t _cuda_dtype(dtype) except -1:
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return DTYPES[dtype]
    code = int(dtype)
    if code not in DTYPES.values():
        raise ValueError(f"unknown dtype code {code}")
    return code


def cuda_device_count():
    """Number of CUDA devices the kernels can use: 0 in a build without CUDA
    or on a machine without a GPU or NVIDIA driver."""
    cdef int32_t n = 0
    if not mxp_cuda_built():
        return 0
    _check(mxp_cuda_device_count(&n))
    return n


def cuda_scale(uintptr_t data, int64_t count, dtype, double factor, uintptr_t stream=0):
    """data[i] *= factor for i < count, on the GPU (nothing when factor == 1)."""
    cdef int32_t code = _cuda_dtype(dtype)
    cdef int rc
    with nogil:
        rc = mxp_cuda_scale(<void*>data, count, code, factor, <void*>stream)
    _check(rc)


def cuda_copy_and_scale(uintptr_t dst, uintptr_t src, int64_t count, dtype, double factor=1.0,
                        uintptr_t stream=0):
    """dst[i] = src[i] * factor for i < count, on the GPU; dst may equal src."""
    cdef int32_t code = _cuda_dtype(dtype)
    cdef int rc
    with nogil:
        rc = mxp_cuda_copy_and_scale(<void*>dst, <const void*>src, count, code, factor, <void*>stream)
    _check(rc)


def cuda_batched_copy(copies, dtype, uintptr_t stream=0):
    """Every copy of `copies`, tuples (dst, src, count, scale) of one dtype,
    in one kernel launch per 64 copies: dst[i] = src[i] * scale. Packs
    tensors into a fusion buffer (dst at offsets into it) or unpacks it."""
    cdef int32_t code = _cuda_dtype(dtype)
    cdef list items = list(copies)
    cdef int32_t n = len(items)
    cdef mxp_cuda_copy* c = <mxp_cuda_copy*>malloc(max(n, 1) * sizeof(mxp_cuda_copy))
    cdef int32_t i
    cdef int rc
    if c == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            dst, src, count, scale = items[i]
            c[i].dst = <void*><uintptr_t>dst
            c[i].src = <const void*><uintptr_t>src
            c[i].count = count
            c[i].scale = scale
        with nogil:
            rc = mxp_cuda_batched_copy(c, n, code, <void*>stream)
    finally:
        free(c)
    _check(rc)


def cuda_synchronize(uintptr_t stream=0):
    """Waits for the work queued on `stream`; raises the first error of it."""
    cdef int rc
    with nogil:
        rc = mxp_cuda_synchronize(<void*>stream)
    _check(rc)
