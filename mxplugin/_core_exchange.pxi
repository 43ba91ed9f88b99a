# Small host allgathers and alltoalls in one blocking call, included by _core.pyx.


def exchange_host_arrays(Core core, int op_type, list inputs, list names, list splits, int process_set_id,
                         int set_size, int priority, group):
    """Note [Host exchanges in one call] (src/mxnet/host_exchange.cc):
    allgathers (op_type OP_ALLGATHER, splits[i] None) or alltoalls
    (OP_ALLTOALL, splits[i] the rows sent to each rank, or None for equal
    blocks) of host NDArrays inputs[i], as one call's group negotiated
    under `group` on a set of set_size ranks; the adapter reads each dtype
    and shape from the array. Blocks, and returns the new output NDArrays'
    handles (ints) for the caller to own, the rows each rank sent this one
    per op (lists), and the bytes of the whole exchange (on a failure, the
    exception's exchanged_bytes: None where there was none); None, with
    nothing submitted, where the path declines the call (an input it does
    not take, or splits that do not cover the rows: the caller's engine
    path checks them)."""
    cdef int n = len(inputs)
    if len(names) != n or len(splits) != n:
        raise ArgumentError(f"exchange_host_arrays: {n} inputs, {len(names)} names, {len(splits)} splits")
    cdef _OpBatch batch = _OpBatch(n)
    cdef mxp_op* o
    cdef bytes name
    cdef int i
    cdef int rc
    cdef int64_t total = 0
    cdef int32_t declined = 0
    cdef const char* group_ptr = batch.text(group)
    cdef void** outs = <void**>malloc(max(n, 1) * sizeof(void*))
    cdef int64_t* rows = <int64_t*>malloc(max(n * set_size, 1) * sizeof(int64_t))
    try:
        for i in range(n):
            o = &batch.ops[i]  # zeroed: shapes are read from the arrays
            name = (<str>names[i]).encode()
            batch.keep.append(name)
            o.name = name
            o.op_type = op_type
            o.dtype = MXP_DTYPE_OF_ARRAY
            o.device = MXP_CPU_DEVICE
            o.prescale = 1.0
            o.postscale = 1.0
            o.priority = priority
            o.input = <void*><uintptr_t>inputs[i].handle.value
            o.group = group_ptr
            if splits[i] is not None:
                o.nsplits = len(splits[i])
                o.splits = batch._ints(splits[i])
        with nogil:
            rc = mxp_mxnet_exchange_host(core.c, batch.ops, n, process_set_id, outs, rows, set_size, &total,
                                         &declined)
        try:
            _check(rc)
        except Exception as e:
            e.exchanged_bytes = total if total >= 0 else None  # a failure of this rank's alone after the exchange
            raise
        if declined:
            return None
        return ([<uintptr_t>outs[i] for i in range(n)],
                [[rows[i * set_size + r] for r in range(set_size)] for i in range(n)], total)
    finally:
        free(outs)
        free(rows)
