# PowerSGD's passes (src/compress/powersgd.h), included by _core.pyx.

POWERSGD_ACCUMULATE, POWERSGD_RESIDUAL, POWERSGD_RECONSTRUCT = 0, 1, 2


cdef class _PowerSgdMatrices:
    """A C array of mxp_powersgd_matrix, freed with the object."""
    cdef mxp_powersgd_matrix* c
    cdef int32_t count

    def __cinit__(self, int32_t count):
        if count < 1:
            raise ArgumentError(f"PowerSGD: a stage needs at least one matrix, got {count}")
        self.c = <mxp_powersgd_matrix*>malloc(count * sizeof(mxp_powersgd_matrix))
        if self.c == NULL:
            raise MemoryError()
        memset(self.c, 0, count * sizeof(mxp_powersgd_matrix))
        self.count = count

    def __dealloc__(self):
        free(self.c)


cdef int _powersgd_shape(mxp_powersgd_matrix* c, tuple shape, int rank) except -1:
    if len(shape) != 2:
        raise ArgumentError(f"PowerSGD: a matrix shape is (m, n), got {shape!r}")
    c.m, c.n, c.rank = shape[0], shape[1], rank
    return 0


def powersgd_stage(int stage, matrices, int priority=0):
    """Pushes one PowerSGD stage (POWERSGD_ACCUMULATE, _RESIDUAL or
    _RECONSTRUCT) over `matrices` as one op of MXNet's engine. matrices:
    [(grad, error, p, q, (m, n), rank)] of mxnet NDArrays (float32, default
    storage, CPU): grad and error of m * n elements, p of rank * min(m, n), q
    of rank * max(m, n). Raises before pushing anything on bad arguments; an
    error while running surfaces as MXNetError where a written array is read."""
    cdef _PowerSgdMatrices all = _PowerSgdMatrices(len(matrices))
    cdef int rc
    for i, (grad, error, p, q, shape, rank) in enumerate(matrices):
        all.c[i].grad = <void*>_ndarray_handle(grad, f"matrix {i}'s gradient")
        all.c[i].error = <void*>_ndarray_handle(error, f"matrix {i}'s error buffer")
        all.c[i].p = <void*>_ndarray_handle(p, f"matrix {i}'s P")
        all.c[i].q = <void*>_ndarray_handle(q, f"matrix {i}'s Q")
        _powersgd_shape(&all.c[i], tuple(shape), rank)
    with nogil:
        rc = mxp_powersgd_stage_mxnet(stage, all.c, all.count, priority)
    _check(rc)


def powersgd_stage_raw(int stage, matrices):
    """powersgd_stage on NumPy arrays (float32, C-contiguous, writable), run
    now on the calling thread with the GIL released."""
    cdef _PowerSgdMatrices all = _PowerSgdMatrices(len(matrices))
    cdef int rc
    for i, (grad, error, p, q, shape, rank) in enumerate(matrices):
        m, n = shape
        rows, cols = min(m, n), max(m, n)
        for role, array, size in (("gradient", grad, m * n), ("error buffer", error, m * n), ("P", p, rank * rows),
                                  ("Q", q, rank * cols)):
            if array.size != size:
                raise ArgumentError(f"PowerSGD: matrix {i}'s {role} has {array.size} elements, the matrix needs "
                                    f"{size}")
        all.c[i].grad = <void*>_float32_data(grad, f"matrix {i}'s gradient", True)
        all.c[i].error = <void*>_float32_data(error, f"matrix {i}'s error buffer", True)
        all.c[i].p = <void*>_float32_data(p, f"matrix {i}'s P", True)
        all.c[i].q = <void*>_float32_data(q, f"matrix {i}'s Q", True)
        _powersgd_shape(&all.c[i], tuple(shape), rank)
    with nogil:
        rc = mxp_powersgd_stage_raw(stage, all.c, all.count)
    _check(rc)
