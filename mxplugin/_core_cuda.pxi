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
            raise ArgumentError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return DTYPES[dtype]
    code = int(dtype)
    if code not in DTYPES.values():
        raise ArgumentError(f"unknown dtype code {code}")
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
