# --- fused optimizer kernels
#
# One call updates a whole group of parameters stored back to back in one
# flat float32 buffer, with the arithmetic of MXNet 1.9.1's optimizer ops
# (src/optim/). Two entries: fused_update (NDArrays, one engine op) and
# fused_update_raw (NumPy arrays, runs now; for tests and tools).

import numpy as _np

cdef dict _fused_kinds():
    """name -> OptimizerKind, from the core's one table (src/optim/update.h)."""
    cdef int32_t n = 0
    cdef const char* name = NULL
    _check(mxp_optim_num_kinds(&n))
    kinds = {}
    for k in range(n):
        _check(mxp_optim_kind_name(k, &name))
        kinds[name.decode()] = k
    return kinds


# The fused optimizers by name; each one's states are described by the core
# (fused_num_states; the order is the MXNet op's, src/optim/params.h).
FUSED_KINDS = _fused_kinds()
# Parameters where None means "off" (MXNet's -1).
_FUSED_OFF_WHEN_NONE = ("clip_gradient", "clip_weights", "lower_bound", "upper_bound")


cdef int _fused_kind(kind) except -1:
    try:
        return FUSED_KINDS[kind]
    except (KeyError, TypeError):
        raise ArgumentError(f"unknown fused optimizer {kind!r}; choose one of {', '.join(FUSED_KINDS)}") from None


cdef int _fused_params(kind, dict params, mxp_optim_params* out) except -1:
    cdef int32_t code = _fused_kind(kind)
    _check(mxp_optim_default_params(code, out))
    required = ("lr", "t") if kind == "lamb" else ("lr",)
    missing = [k for k in required if k not in params]
    if missing:
        raise ArgumentError(f"fused {kind} needs {', '.join(missing)}")
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
            raise ArgumentError(f"at most 3 optimizer states, got {len(pointers)}")
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
            raise ArgumentError("segments must hold at least two offsets (0 and the buffer size)")
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
        raise ArgumentError(f"{role} is a null NDArray")
    return <uintptr_t>value


cdef uintptr_t _float32_data(array, str role, bint writable) except? 0:
    if not isinstance(array, _np.ndarray):
        raise TypeError(f"{role} must be a numpy.ndarray, got {type(array).__name__}")
    if array.dtype != _np.float32:
        raise TypeError(f"{role} has dtype {array.dtype}; fused updates take float32 only")
    if not array.flags.c_contiguous:
        raise ArgumentError(f"{role} is not C-contiguous")
    if writable and not array.flags.writeable:
        raise ArgumentError(f"{role} is read-only; it is updated in place")
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
            raise ArgumentError(f"{role} has {array.size} elements but weight has {weight.size}")
    b.c.size = weight.size
    b.set_segments(segments)
    with nogil:
        rc = mxp_optim_update_raw(&p, &b.c)
    _check(rc)
