"""Makes a drawn case's call on this rank (fuzz_cases.Case) and checks what
came back: the numbers of a call that worked, against NumPy."""
import threading

import mxnet as mx
import numpy as np

import mxplugin as hvd
from fuzz_cases import OPS
from fuzz_data import Tensor, close, gpu_array, reduce_model, to_numpy


def _container(case, arrays):
    if case.container == "tuple":
        return tuple(arrays)
    if case.container == "generator":
        return (a for a in arrays)
    return list(arrays)


def _bad_tensor(value, shape, dtype):
    """The array for bad tensor argument `value` ('bool', 'gpu', ... or a non-NDArray itself)."""
    shape = shape or (2,)
    if not isinstance(value, str):
        return value
    if value == "bool":
        return mx.nd.array(np.ones(shape), dtype=bool)
    if value == "gpu":
        return gpu_array(shape, dtype)
    if value == "sparse":
        return mx.nd.sparse.zeros("row_sparse", (max(shape[0], 1), 2))
    if value == "scalar":
        return mx.nd.array(np.array(3.0))
    return value


class Call:
    """This rank's call of `case`: its arguments, then run() -> what to read."""

    def __init__(self, case):
        self.case = case
        c = case
        self.bad_here = c.bad is not None and (c.mode == "all_bad" or (c.mode == "one_bad" and c.me_odd))
        self.differs = c.mode == "mismatch" and c.me_odd
        self.kwargs = {}
        if c.kind not in ("broadcast_object", "allgather_object", "process_set"):
            self.kwargs = {"name": c.name, "priority": c.priority, "process_set": c.pset}
        self.arrays = []
        self.pset = None

    def apply_bad(self, kwargs):
        if not self.bad_here:
            return
        field, value, _ = self.case.bad
        if field in ("tensor", "object", "ranks"):
            return
        if field == "process_set":
            kwargs[field] = "global" if value == "global" else hvd.ProcessSet(list(self.case.members))
        elif field == "average":
            kwargs["average"] = value
            kwargs.setdefault("op", OPS[self.case.op])
        elif field == "splits":
            return
        else:
            if field == "op":
                kwargs.pop("average", None)
            kwargs[field] = value

    def tensor_arrays(self, tensors, rank, shapes=None):
        arrays = [t.make(rank, None if shapes is None else shapes[i]) for i, t in enumerate(tensors)]
        c = self.case
        if self.bad_here and c.bad[0] == "tensor":
            k = (c.index * 7) % max(len(arrays), 1)
            if isinstance(c.bad[1], str) and c.bad[1] == "duplicate":
                if len(arrays) == 1:
                    arrays.append(arrays[0])
                else:
                    arrays[k] = arrays[0 if k else 1]
            else:
                arrays[k] = _bad_tensor(c.bad[1], tensors[k].shape if shapes is None else shapes[k], tensors[k].dtype)
        return arrays

    # --- one method per kind
    def run(self):
        c = self.case
        if self.differs and getattr(c, "mismatch", None) == "kind":
            return self.run_other_kind()
        return getattr(self, "run_" + c.kind.rstrip("_").replace("grouped_", ""))()

    def run_other_kind(self):
        """The odd rank calls another collective under the case's name."""
        c = self.case
        kind = c.other_kind
        kw = {"name": c.name, "priority": c.priority, "process_set": c.pset}
        a = mx.nd.ones((len(c.members) * 2, 5))  # no drawn shape has a 5: never the others' call by chance
        if kind == "allreduce":
            return [hvd.allreduce(a, op=hvd.Sum, **kw)]
        if kind == "grouped_allreduce":
            return hvd.grouped_allreduce([a, a], op=hvd.Sum, **kw)
        if kind == "broadcast":
            return [hvd.broadcast(a, c.members[0], **kw)]
        if kind == "allgather":
            return [hvd.allgather(a, **kw)]
        if kind == "alltoall":
            return [hvd.alltoall(a, **kw)]
        return [hvd.reducescatter(a, op=hvd.Sum, **kw)]

    def allreduce_kwargs(self):
        c = self.case
        kw = dict(self.kwargs)
        op = c.other_op if self.differs and c.mismatch == "op" else c.op
        if c.use_average_kwarg and op in ("Average", "Sum"):
            kw["average"] = op == "Average"
        else:
            kw["op"] = OPS[op]
        kw["prescale_factor"] = c.other_factor if self.differs and c.mismatch == "prescale" else c.pre
        kw["postscale_factor"] = c.other_factor if self.differs and c.mismatch == "postscale" else c.post
        self.apply_bad(kw)
        return kw

    def my_tensors(self):
        """The case's tensors as this rank makes them (the odd rank's differ in a mismatch)."""
        c = self.case
        tensors = list(c.tensors)
        if self.differs and c.mismatch == "count":
            tensors = tensors[:c.other_count] + [Tensor(c, 10 + i, "float32", (3,), mx.cpu(), "plain")
                                                 for i in range(c.other_count - len(tensors))]
        if self.differs and c.mismatch in ("shape", "dtype") and tensors:
            k = len(tensors) - 1
            t = tensors[k]
            if c.mismatch == "dtype":
                shape = (1,) if c.other_dtype == "bfloat16" and not t.shape else t.shape
                tensors[k] = Tensor(c, t.slot, c.other_dtype, shape, t.ctx, "plain")
            else:
                shape = (t.shape[0] + 1,) + tuple(t.shape[1:]) if t.shape else (2,)
                tensors[k] = Tensor(c, t.slot, t.dtype, shape, t.ctx, "plain")
        return tensors

    def run_allreduce(self):
        c = self.case
        kw = self.allreduce_kwargs()
        tensors = self.my_tensors()
        self.arrays = self.tensor_arrays(tensors, c.rank)
        in_place = self.in_place = c.in_place != (c.mixed_in_place and c.rank == c.odd and c.mode == "valid")
        grouped = c.kind.startswith("grouped") or len(tensors) != 1
        if not grouped:
            f = hvd.allreduce_ if in_place else hvd.allreduce
            return [f(self.arrays[0], **kw)]
        f = hvd.grouped_allreduce_ if in_place else hvd.grouped_allreduce
        out = f(_container(c, self.arrays), **kw)
        assert len(out) == len(self.arrays), f"{len(out)} outputs for {len(self.arrays)} tensors"
        if in_place:
            for a, o in zip(self.arrays, out):
                assert a is o, "an in-place grouped call returned other arrays than it was given"
        return list(out)

    def run_allgather(self):
        c = self.case
        kw = dict(self.kwargs)
        self.apply_bad(kw)
        tensors = list(c.tensors)
        if self.differs and c.mismatch == "count":
            tensors = self.my_tensors()
        shapes = []
        for k, t in enumerate(tensors):
            first = c.firsts[k][c.rank] if k < len(c.firsts) else 2
            rest = list(t.shape[1:])
            if self.differs and k == len(tensors) - 1:
                if c.mismatch == "trailing":
                    rest = rest[:-1] + [rest[-1] + 1] if rest else [2]
                elif c.mismatch == "ndim":
                    rest = rest + [1]
            shapes.append(tuple([first] + rest))
        if self.differs and c.mismatch == "dtype":
            tensors[-1] = Tensor(c, tensors[-1].slot, c.other_dtype, tensors[-1].shape, mx.cpu(), "plain")
        self.arrays = self.tensor_arrays(tensors, c.rank, shapes)
        if c.kind == "allgather" and len(self.arrays) == 1:
            return [hvd.allgather(self.arrays[0], **kw)]
        return list(hvd.grouped_allgather(_container(c, self.arrays), **kw))

    def run_broadcast(self):
        c = self.case
        kw = dict(self.kwargs)
        root = c.other_root if self.differs and c.mismatch == "root" else c.root
        kw["root_rank"] = c.root_type(root)
        self.apply_bad(kw)
        tensors = self.my_tensors()
        self.arrays = self.tensor_arrays(tensors, c.rank)
        in_place = self.in_place = c.in_place != (c.mixed_in_place and c.rank == c.odd and c.mode == "valid")
        f = hvd.broadcast_ if in_place else hvd.broadcast
        return [f(self.arrays[0], **kw)]

    def run_alltoall(self):
        c = self.case
        kw = dict(self.kwargs)
        self.apply_bad(kw)
        t = c.tensors[0]
        rest = list(t.shape[1:])
        if self.differs and c.mismatch == "trailing":
            rest = rest[:-1] + [rest[-1] + 1] if rest else [2]
        shape = tuple([c.rows[c.rank]] + rest)
        if self.differs and c.mismatch == "dtype":
            t = Tensor(c, t.slot, c.other_dtype, t.shape, mx.cpu(), "plain")
        self.arrays = self.tensor_arrays([t], c.rank, [shape])
        mine = c.splits[c.rank]
        splits = {"none": None, "list": list(mine), "tuple": tuple(mine),
                  "int32": np.array(mine, dtype=np.int32), "int64": np.array(mine, dtype=np.int64),
                  "ndarray": mx.nd.array(mine, dtype="int32")}[c.splits_form]
        if self.bad_here and c.bad[0] == "splits":
            value = c.bad[1]
            if isinstance(value, str) and value == "negative":
                splits = [-1, shape[0] + 1] + [0] * (len(c.members) - 2)
            elif isinstance(value, str) and value == "wrong_sum":
                splits = [shape[0] + 1] + [0] * (len(c.members) - 1)
            else:
                splits = value
        if splits is None:
            return [hvd.alltoall(self.arrays[0], **kw)]
        out, received = hvd.alltoall(self.arrays[0], splits=splits, **kw)
        return [out, received]

    def run_reducescatter(self):
        c = self.case
        kw = self.allreduce_kwargs()
        kw.pop("average", None)
        tensors = self.my_tensors()
        self.arrays = self.tensor_arrays(tensors, c.rank)
        if c.kind == "reducescatter" and len(self.arrays) == 1:
            return [hvd.reducescatter(self.arrays[0], **kw)]
        return list(hvd.grouped_reducescatter(_container(c, self.arrays), **kw))

    def run_broadcast_object(self):
        c = self.case
        root = c.root
        obj = c.obj if c.rank == c.root else "not the root's"
        name = c.name
        if self.bad_here:
            field, value, _ = c.bad
            if field == "root_rank":
                root = value
            elif field == "object":
                obj = threading.Lock()
            elif field == "name":
                name = value
        if self.differs:
            root = c.rank
            obj = "the odd rank's"
        return [hvd.broadcast_object(obj, root_rank=root, name=name)]

    def run_allgather_object(self):
        c = self.case
        obj = threading.Lock() if self.bad_here else c.objs[c.rank]
        return [hvd.allgather_object(obj, name=c.name, process_set=c.pset)]

    def run_process_set(self):
        c = self.case
        ranks = c.new_ranks
        if self.bad_here:
            ranks = c.bad[1]
        if self.differs:
            ranks = c.other_ranks
        self.pset = hvd.add_process_set(ranks)
        out = []
        if c.rank in self.pset.ranks:
            self.arrays = [c.tensors[0].make(c.rank)]
            out = [hvd.allreduce(self.arrays[0], op=hvd.Sum, name=c.name, process_set=self.pset)]
        return out

    def cleanup(self):
        if self.pset is not None and self.pset.process_set_id is not None:
            hvd.remove_process_set(self.pset)


def read(result):
    """Reads every output (where asynchronous errors surface)."""
    values = []
    for item in result:
        if isinstance(item, mx.nd.NDArray):
            values.append(to_numpy(item))
        elif isinstance(item, (list, tuple)) and item and isinstance(item[0], mx.nd.NDArray):
            values.append([to_numpy(a) for a in item])
        else:
            values.append(item)
    return values


def _same_object(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if callable(a) and callable(b):
        return a(1) == b(1)
    return a == b


def check(call, values):
    """Asserts that a call that worked gave the right numbers."""
    c = call.case
    what = c.text
    members = c.members
    n = len(members)
    me = c.pset_index
    if c.kind in ("allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "process_set"):
        if c.kind == "process_set":
            members = call.pset.ranks
            if c.rank not in members:
                return
            n, op, pre, post = len(members), "Sum", 1.0, 1.0
        else:
            op, pre, post = c.op, c.pre, c.post
        assert len(values) == len(c.tensors), f"{what}: {len(values)} outputs for {len(c.tensors)} tensors"
        for k, t in enumerate(c.tensors):
            expected, mag = reduce_model([t.values(r) for r in members], t.dtype, op, pre, post, n)
            close(values[k], expected, t.dtype, mag, f"{what}: output {k}")
            if getattr(call, "in_place", False):
                t.check_parent(expected, f"{what}: tensor {k}", mag)
    elif c.kind in ("reducescatter", "grouped_reducescatter"):
        for k, t in enumerate(c.tensors):
            expected, mag = reduce_model([t.values(r) for r in members], t.dtype, c.op, c.pre, c.post, n)
            rows = t.shape[0]
            counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
            start = sum(counts[:me])
            sl = slice(start, start + counts[me])
            mag = mag[sl] if np.ndim(mag) else mag
            close(values[k], expected[sl], t.dtype, mag, f"{what}: output {k}")
    elif c.kind in ("broadcast", "broadcast_"):
        t = c.tensors[0]
        expected = t.values(c.root)
        close(values[0], expected, t.dtype, 0, what)
        if call.in_place:
            t.check_parent(expected, what)
    elif c.kind in ("allgather", "grouped_allgather"):
        for k, t in enumerate(c.tensors):
            parts = [t.values(r, (c.firsts[k][r],) + tuple(t.shape[1:])) for r in members]
            close(values[k], np.concatenate(parts), t.dtype, 0, f"{what}: output {k}")
    elif c.kind == "alltoall":
        t = c.tensors[0]
        blocks, received = [], []
        for r in members:
            data = t.values(r, (c.rows[r],) + tuple(t.shape[1:]))
            start = sum(c.splits[r][:me])
            blocks.append(data[start:start + c.splits[r][me]])
            received.append(c.splits[r][me])
        close(values[0], np.concatenate(blocks), t.dtype, 0, what)
        if c.splits_form != "none":
            np.testing.assert_array_equal(values[1], received, err_msg=f"{what}: received splits")
    elif c.kind == "broadcast_object":
        assert _same_object(values[0], c.obj), f"{what}: got {values[0]!r}, expected {c.obj!r}"
    elif c.kind == "allgather_object":
        expected = [c.objs[r] for r in members]
        assert len(values[0]) == len(expected) and all(_same_object(a, b) for a, b in zip(values[0], expected)), (
            f"{what}: got {values[0]!r}, expected {expected!r}")
