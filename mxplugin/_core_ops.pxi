# --- op records
#
# What one call's tensors look like as they cross into the C API: Op, the
# Python record of one tensor (mxp_op); _OpBatch, the C structs of a call's
# group, owning what they point into until the call returns; Handle, the
# completion of a group of raw-pointer ops.

cdef class Op:
    """One tensor of a collective, as it crosses into the C API (mxp_op).
    input/output: data pointers (raw entry) or NDArrayHandles (MXNet entry),
    as integers. root_rank: the broadcast root as a global rank (the core
    finds its rank within the process set). stream: for GPU tensors on the
    raw entry, the cudaStream_t the input was produced on (0: the legacy
    default stream). zeros_when_joined: an allgather to which a rank that has
    joined contributes zeros of this shape rather than no rows."""
    cdef public object name, shape, out_shape, splits
    cdef public int op_type, dtype, reduce_op, device, root_rank, priority
    cdef public bint zeros_when_joined
    cdef public double prescale, postscale
    cdef public uintptr_t input, output, stream

    def __init__(self, name, int op_type, int dtype, shape, uintptr_t input, uintptr_t output, *, out_shape=None,
                 int reduce_op=MXP_REDUCE_SUM, int device=MXP_CPU_DEVICE, int root_rank=0, double prescale=1.0,
                 double postscale=1.0, splits=None, int priority=0, uintptr_t stream=0,
                 bint zeros_when_joined=False):
        self.name = name
        self.op_type = op_type
        self.dtype = dtype
        self.shape = list(shape)
        self.input = input
        self.output = output
        self.out_shape = self.shape if out_shape is None else list(out_shape)
        self.reduce_op = reduce_op
        self.device = device
        self.root_rank = root_rank
        self.prescale = prescale
        self.postscale = postscale
        self.splits = None if splits is None else list(splits)
        self.priority = priority
        self.stream = stream
        self.zeros_when_joined = zeros_when_joined

    def __repr__(self):
        return (f"Op({self.name!r}, op_type={self.op_type}, dtype={self.dtype}, shape={self.shape}, "
                f"out_shape={self.out_shape}, reduce_op={self.reduce_op}, device={self.device})")


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

    cdef const char* text(self, value):
        """A str (or bytes) as a C string kept alive with the batch; NULL for None."""
        if value is None:
            return NULL
        cdef bytes b = value.encode() if isinstance(value, str) else value
        self.keep.append(b)
        return b

    cdef set(self, int i, Op op, const char* group):
        cdef mxp_op* o = &self.ops[i]
        cdef bytes name = op.name.encode() if isinstance(op.name, str) else op.name
        self.keep.append(name)
        o.name = name
        o.op_type = op.op_type
        o.reduce_op = op.reduce_op
        o.dtype = op.dtype
        o.device = op.device
        o.ndim = len(op.shape)
        o.shape = self._ints(op.shape)
        o.out_ndim = len(op.out_shape)
        o.out_shape = self._ints(op.out_shape)
        o.root_rank = op.root_rank
        o.prescale = op.prescale
        o.postscale = op.postscale
        if op.splits is None:
            o.nsplits = 0
            o.splits = NULL
        else:
            o.nsplits = len(op.splits)
            o.splits = self._ints(op.splits)
        o.priority = op.priority
        o.input = <void*>op.input
        o.output = <void*>op.output
        o.stream = <void*>op.stream
        o.group = group
        o.zeros_when_joined = op.zeros_when_joined


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

    def output_size(self, int index):
        """After wait(): (bytes, rows) of op `index`'s output, where the op
        was an allgather or alltoall enqueued with output 0 (the core sized it)."""
        cdef const void* data = NULL
        cdef int64_t nbytes = 0
        cdef int64_t rows = 0
        _check(mxp_handle_output(self.h, index, &data, &nbytes, &rows))
        return nbytes, rows

    def output_into(self, int index, uintptr_t address, int64_t nbytes):
        """Copies that output to `nbytes` (its size) of host memory at `address`."""
        cdef const void* data = NULL
        cdef int64_t have = 0
        cdef int64_t rows = 0
        _check(mxp_handle_output(self.h, index, &data, &have, &rows))
        if have != nbytes:
            raise ValueError(f"output {index} holds {have} bytes, not {nbytes}")
        if nbytes:
            memcpy(<void*>address, data, nbytes)
