"""The API reference of the collectives (and of join): for each, what
`documented` completes its summary with (the Horovod line, Parameters,
Returns, Raises, Examples). The summaries stay the functions' own
docstrings where they are defined; the sections are kept here so that the
code stays short to read. Each example runs as it is on every rank of a
job, and prints the same there."""
from mxplugin.docstrings import documented

_ARRAY = "NDArray or mxnet.numpy.ndarray"

_NOT_INITIALIZED = ("NotInitializedError", "Before ``init()``, or after ``shutdown()``.")
_TYPES = ("TypeError", "An array that is not an MXNet NDArray (a grouped call: ``tensors`` not a list of them), "
                       "a ``name`` that is not a str, a ``priority`` that is not an int, a ``process_set`` that is "
                       "not a ProcessSet, an array of a dtype collectives do not take.")
_SCALED_TYPES = ("TypeError", _TYPES[1][:-1] + ", a scale factor that is not a number.")
_READ = ("mxnet.base.MXNetError", "When the result is read, on every rank, where the ranks' calls under one name "
                                  "disagree (shape, dtype, op, scale factors: the message names the tensor, what "
                                  "differed and the ranks), or where a peer was lost.")


def _arguments(what):
    return ("ArgumentError", f"{what} A ValueError and an mxnet.base.MXNetError, raised before anything is "
                             "sent: the other ranks' call under that name then fails too, naming this rank.")


_REDUCE_ERRORS = (_NOT_INITIALIZED, _SCALED_TYPES,
                  _arguments("``op`` and ``average`` both given, an unknown op, a sparse array, a process set "
                             "that is not registered or does not hold this rank."),
                  ("NotImplementedError", "``op=Adasum``."), _READ)
_PLAIN_ERRORS = (_NOT_INITIALIZED, _TYPES,
                 _arguments("A sparse array, a process set that is not registered or does not hold this rank."),
                 _READ)
_GATHER_ERRORS = (_NOT_INITIALIZED, _TYPES,
                  _arguments("An array of no dimension, a sparse array, a process set that is not registered "
                             "or does not hold this rank."),
                  ("MismatchError", "Raised by the call itself, on every rank, where the ranks' arrays differ in "
                                    "dtype or in their dimensions after the first."), _READ)
_BROADCAST_ERRORS = (_NOT_INITIALIZED, ("TypeError", _TYPES[1] + " A ``root_rank`` that is not an int."),
                     _arguments("A ``root_rank`` out of range, a sparse array, a process set that is not "
                                "registered or does not hold this rank."), _READ)
_SCATTER_ERRORS = (_NOT_INITIALIZED, _SCALED_TYPES,
                   _arguments("An ``op`` other than Average or Sum, an array of no dimension, a sparse array, "
                              "a process set that is not registered or does not hold this rank."), _READ)

_REDUCTION = ("tensor", "average", "name", "priority", "prescale_factor", "postscale_factor", "process_set", "op")
_GROUPED_REDUCTION = ("tensors",) + _REDUCTION[1:]
_SCATTER_OP = ("op", "Average or Sum, default Average",
               "The reduction: Average divides the sum by the process set's size.")
_SCATTER = ("tensor", _SCATTER_OP, "name", "priority", "process_set", "prescale_factor", "postscale_factor")

_START = """>>> import mxnet as mx, mxplugin as hvd
>>> hvd.init()"""
_ROWS = (_ARRAY, "This rank's array: at least one dimension; the first may differ between ranks, the others "
                 "(and the dtype) must agree.")

ENTRIES = {
    "allreduce": dict(
        names=_REDUCTION, returns=(_ARRAY, "A new array of the input's kind, shape and type."),
        horovod="``hvd.allreduce``, same signature and defaults.", raises=_REDUCE_ERRORS,
        example=_START + """
>>> total = hvd.allreduce(mx.nd.ones(3) * (hvd.rank() + 1), op=hvd.Sum)
>>> total.asnumpy().tolist() == [hvd.size() * (hvd.size() + 1) / 2] * 3
True
"""),
    "allreduce_": dict(
        names=_REDUCTION, returns=(_ARRAY, "``tensor`` itself, holding the result."),
        horovod="``hvd.allreduce_``, same signature and defaults.", raises=_REDUCE_ERRORS,
        example=_START + """
>>> x = mx.nd.ones(3) * (hvd.rank() + 1)
>>> hvd.allreduce_(x, op=hvd.Max) is x
True
>>> x.asnumpy().tolist() == [hvd.size()] * 3  # the highest rank's
True
"""),
    "grouped_allreduce": dict(
        names=_GROUPED_REDUCTION, returns=("list", "New arrays, one per input, in order, each of its input's "
                                                   "kind, shape and type (an empty list for no inputs)."),
        horovod="``hvd.grouped_allreduce``, same signature and defaults.", raises=_REDUCE_ERRORS,
        example=_START + """
>>> ones, twos = hvd.grouped_allreduce([mx.nd.ones(1), mx.nd.full(2, 2)])  # the default op: Average
>>> ones.asnumpy(), twos.asnumpy()
(array([1.], dtype=float32), array([2., 2.], dtype=float32))
"""),
    "grouped_allreduce_": dict(
        names=_GROUPED_REDUCTION, returns=("list", "``tensors`` itself (when a list or tuple), holding the "
                                                   "results."),
        horovod="``hvd.grouped_allreduce_``, same signature and defaults.",
        raises=_REDUCE_ERRORS[:2] + (_arguments(
            "As for ``grouped_allreduce``, and one array given twice in the list."),) + _REDUCE_ERRORS[3:],
        example=_START + """
>>> n = hvd.size()
>>> grads = [mx.nd.ones(2) * hvd.rank(), mx.nd.ones(3)]
>>> hvd.grouped_allreduce_(grads, op=hvd.Sum) is grads
True
>>> [g.asnumpy().tolist() for g in grads] == [[n * (n - 1) / 2] * 2, [n] * 3]
True
"""),
    "allgather": dict(
        names=(("tensor",) + _ROWS, "name", "priority", "process_set"),
        returns=(_ARRAY, "A new array: the ranks' arrays concatenated along the first axis, in rank order (first "
                         "dimensions may differ between ranks)."),
        horovod="``hvd.allgather``, same signature and defaults. As there, the call blocks until every rank of "
                "the set has made it: the output's first dimension is the sum of theirs.",
        raises=_GATHER_ERRORS,
        example=_START + """
>>> rows = hvd.allgather(mx.nd.full((hvd.rank() + 1, 2), hvd.rank()))  # rank r sends r + 1 rows
>>> rows.shape[0] == hvd.size() * (hvd.size() + 1) // 2
True
>>> rows.asnumpy()[:, 0].tolist() == [r for r in range(hvd.size()) for _ in range(r + 1)]
True
"""),
    "grouped_allgather": dict(
        names=(("tensors", "list of " + _ROWS[0], "The arrays, each as ``allgather`` takes it; the same number on "
                                                  "every rank."), "name", "priority", "process_set"),
        returns=("list", "New arrays, one per input, in order, each as ``allgather`` returns it (an empty list "
                         "for no inputs)."),
        horovod="``hvd.grouped_allgather``, same signature and defaults; it blocks as ``allgather`` does.",
        raises=_GATHER_ERRORS,
        example=_START + """
>>> n, r = hvd.size(), hvd.rank()
>>> marks, ones = hvd.grouped_allgather([mx.nd.full((1, 2), r), mx.nd.ones(r + 1)])
>>> marks.asnumpy()[:, 0].tolist() == list(range(n)), ones.asnumpy().tolist() == [1] * (n * (n + 1) // 2)
(True, True)
"""),
    "broadcast": dict(
        names=("tensor", "root_rank", "name", "priority", "process_set"),
        returns=(_ARRAY, "A new array of the input's kind holding ``root_rank``'s ``tensor``; ``tensor`` is left "
                         "as it is."),
        horovod="``hvd.broadcast``, same signature and defaults.", raises=_BROADCAST_ERRORS,
        example=_START + """
>>> hvd.broadcast(mx.nd.full(2, hvd.rank() + 5), root_rank=0).asnumpy()
array([5., 5.], dtype=float32)
"""),
    "broadcast_": dict(
        names=("tensor", "root_rank", "name", "priority", "process_set"),
        returns=(_ARRAY, "``tensor`` itself, holding ``root_rank``'s."),
        horovod="``hvd.broadcast_``, same signature and defaults.", raises=_BROADCAST_ERRORS,
        example=_START + """
>>> x = mx.nd.full(2, hvd.rank() + 5)
>>> hvd.broadcast_(x, root_rank=0) is x
True
>>> x.asnumpy()
array([5., 5.], dtype=float32)
"""),
    "alltoall": dict(
        names=(("tensor",) + _ROWS, ("splits", "list or tuple of int, or int32/int64 NDArray, optional",
                          "How many rows (of the first dimension, in order) go to each rank of the set, in the "
                          "set's rank order; they sum to the first dimension. By default it is divided evenly "
                          "(it must then be divisible by the set's size)."), "name", "priority", "process_set"),
        returns=(f"{_ARRAY}, or (it, NDArray)", "What every rank sent this rank, concatenated in rank order; "
                 "when ``splits`` is given, also an int32 array of how many rows came from each rank."),
        horovod="``hvd.alltoall``, same signature, defaults and returns; splits that are not integers are "
                "refused rather than truncated.",
        raises=(_NOT_INITIALIZED, _TYPES,
                _arguments("Splits that are not integers, not one per rank, negative, or not summing to the first "
                           "dimension; a first dimension the set's size does not divide (without splits); an "
                           "array of no dimension; a process set that is not registered or does not hold this "
                           "rank."),
                ("MismatchError", "Raised by the call itself for host arrays, on every rank, where the ranks' "
                                  "arrays differ in dtype or in their dimensions after the first, or a rank of "
                                  "the set has joined."), _READ),
        example=_START + """
>>> n, r = hvd.size(), hvd.rank()
>>> received = hvd.alltoall(mx.nd.arange(n) + 10 * r)  # row i goes to rank i
>>> received.asnumpy().tolist() == [r + 10.0 * k for k in range(n)]  # row r of every rank
True
>>> rows, counts = hvd.alltoall(mx.nd.ones((2 * n, 1)), splits=[2] * n)
>>> rows.asnumpy().ravel().tolist() == [1] * 2 * n, counts.asnumpy().tolist() == [2] * n
(True, True)
"""),
    "reducescatter": dict(
        names=_SCATTER,
        returns=(_ARRAY, "A new array: this rank's block of the reduced first dimension (the blocks in rank "
                         "order; where the size does not divide it, the lower ranks get one row more)."),
        horovod="``hvd.reducescatter``, same signature and defaults.", raises=_SCATTER_ERRORS,
        example=_START + """
>>> n, r = hvd.size(), hvd.rank()
>>> block = hvd.reducescatter(mx.nd.arange(2 * n), op=hvd.Sum)  # rank r gets rows 2r and 2r + 1, summed
>>> block.asnumpy().tolist() == [2.0 * r * n, (2.0 * r + 1) * n]
True
"""),
    "grouped_reducescatter": dict(
        names=("tensors",) + _SCATTER[1:],
        returns=("list", "New arrays, one per input, in order, each as ``reducescatter`` returns it (an empty "
                         "list for no inputs)."),
        horovod="``hvd.grouped_reducescatter``, same signature and defaults.", raises=_SCATTER_ERRORS,
        example=_START + """
>>> n = hvd.size()
>>> rows, values = hvd.grouped_reducescatter([mx.nd.ones((n, 2)), mx.nd.ones(2 * n)])  # Average
>>> rows.asnumpy().tolist(), values.asnumpy().tolist()
([[1.0, 1.0]], [1.0, 1.0])
"""),
    "barrier": dict(
        names=("process_set",), horovod="``hvd.barrier``, same signature.",
        raises=(_NOT_INITIALIZED, ("TypeError", "A ``process_set`` that is not a ProcessSet."),
                ("ArgumentError", "A process set that is not registered or does not hold this rank."),
                ("PeerFailureError", "A peer was lost while this rank waited.")),
        example=_START + """
>>> hvd.barrier()  # returns once every rank has called it
"""),
    "join": dict(
        names=(("device", "int, default -1", "Horovod's argument (the device of its stand-in zeros); taken and "
                                             "ignored: the stand-ins are host memory."), "process_set"),
        returns=("int", "The global rank that called ``join()`` last, the same on every rank."),
        horovod="``hvd.join``: as there, a joined rank adds zeros to the others' reductions (their averages "
                "still divide by the set's size) and the last rank to join is returned; ``process_set`` is "
                "mxplugin's own.",
        raises=(_NOT_INITIALIZED, ("TypeError", "A ``process_set`` that is not a ProcessSet."),
                ("ArgumentError", "A process set that is not registered or does not hold this rank."),
                ("mxnet.base.MXNetError", "On the ranks still running, from a call a joined rank cannot stand "
                                          "in for (an alltoall, a broadcast from a joined root, GPU arrays): "
                                          "raised by the call or when its result is read, naming the joined "
                                          "ranks.")),
        example=_START + """
>>> steps = 2 if hvd.rank() == 0 else 1  # uneven data: rank 0 has one batch more than the others
>>> sums = [hvd.allreduce(mx.nd.ones(1), op=hvd.Sum, name="join.example").asscalar() for _ in range(steps)]
>>> hvd.join()  # the others stand in for rank 0's second allreduce, with zeros
0
>>> sums == ([hvd.size(), 1] if hvd.rank() == 0 else [hvd.size()])
True
"""),
}


def reference(name):
    """The decorator that completes collective `name`'s docstring with its
    entry of ENTRIES."""
    entry = dict(ENTRIES[name])
    return documented(*entry.pop("names"), **entry)
