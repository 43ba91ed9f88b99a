"""The data of check_fuzz.py's cases: the arrays each rank passes (made
from generators any rank can recreate) and what a reduction of them must
give, modelled in NumPy as the core computes it."""
import mxnet as mx
import numpy as np

from mxplugin.ops import BFLOAT16

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["uint8", "int8", "int32", "int64"]
DTYPES = FLOATS + INTS
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def proper_subsets(size):
    """Every non-empty proper subset of the ranks, smallest first."""
    subsets = [[r for r in range(size) if bits >> r & 1] for bits in range(1, 2 ** size - 1)]
    return sorted(subsets, key=lambda s: (len(s), s))


def gpu_array(shape, dtype):
    """An NDArray on gpu(0) whose memory is never allocated: a CPU build of
    MXNet can describe one but not create its data."""
    from mxnet.ndarray.ndarray import _new_alloc_handle

    kind = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype).type
    return mx.nd.NDArray(handle=_new_alloc_handle(tuple(shape), mx.gpu(0), True, kind))


def to_numpy(array):
    if array.size == 0:  # MXNet cannot cast an empty array (a 0 in a shape means "unknown" to astype)
        array.wait_to_read()
        return np.zeros(array.shape)
    if array.dtype == BFLOAT16:
        array = array.astype("float32")
    return array.asnumpy()


class FuzzBug(Exception):
    """The fuzz itself failed (making a case's arrays), not the library."""


class Tensor:
    """One tensor argument: how it is made (dtype, shape, context, view) on
    every rank; values(rank) is what rank `rank` puts in it."""

    def __init__(self, case, slot, dtype, shape, ctx, form):
        self.case, self.slot, self.dtype, self.shape, self.ctx, self.form = case, slot, dtype, shape, ctx, form
        self.parent = None  # the array a view lies in, and the view's rows in it
        self.rows = None

    def values(self, rank, shape=None):
        shape = self.shape if shape is None else shape
        rng = np.random.RandomState((self.case.seed * 1000003 + self.case.index * 1009 + rank * 31 + self.slot)
                                    % 2 ** 32)
        low = 0 if self.dtype == "uint8" else -4
        out = rng.randint(low, 5, size=shape).astype(np.float64)
        if self.dtype in ("float32", "float64") and rng.rand() < 0.3:
            out = out + rng.uniform(-1, 1, size=shape)
        return out

    def make(self, rank, shape=None):
        """This rank's NDArray (views into a larger array for form 'view' and 'reshape')."""
        try:
            return self._make(rank, self.shape if shape is None else shape)
        except Exception as e:
            raise FuzzBug(f"making {self.dtype}{list(self.shape)} on {self.ctx} ({self.form}): {e}") from e

    def _make(self, rank, shape):
        values = self.values(rank, shape)
        kind = "float32" if self.dtype == "bfloat16" else self.dtype
        if self.dtype == "bfloat16" and values.size == 0:
            return mx.nd.empty(shape, ctx=self.ctx, dtype=BFLOAT16)
        if self.form == "view" and len(shape) >= 1:
            before, after = 1 + self.slot % 2, 2
            full = np.full((before + shape[0] + after,) + tuple(shape[1:]), 7, dtype=np.float64)
            full[before:before + shape[0]] = values
            parent = mx.nd.array(full, ctx=self.ctx, dtype=kind)
            if self.dtype == "bfloat16":
                parent = parent.astype(BFLOAT16)
            self.parent, self.rows = parent, (before, before + shape[0])
            return parent[before:before + shape[0]]
        array = mx.nd.array(values.reshape(-1) if self.form == "reshape" else values, ctx=self.ctx, dtype=kind)
        if self.dtype == "bfloat16":
            array = array.astype(BFLOAT16)
        return array.reshape(shape) if self.form == "reshape" else array

    def check_parent(self, expected_rows, what, magnitude=0):
        """For an in-place op on a view: the rows around it kept their 7s."""
        if self.parent is None:
            return
        full = to_numpy(self.parent)
        a, b = self.rows
        np.testing.assert_array_equal(full[:a], 7, err_msg=f"{what}: rows before the view changed")
        np.testing.assert_array_equal(full[b:], 7, err_msg=f"{what}: rows after the view changed")
        close(full[a:b], expected_rows, self.dtype, magnitude, what + " (seen through the parent)")


def close(got, expected, dtype, magnitude, what):
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    if dtype in INTS:
        np.testing.assert_array_equal(got, expected, err_msg=what)
    else:
        tol = 8 * EPS[dtype] * (np.asarray(magnitude, dtype=np.float64) + np.abs(expected)) + 1e-300
        bad = ~(np.abs(got - expected) <= tol)
        assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements off, e.g. got "
                               f"{got[bad][:5]} expected {expected[bad][:5]}")


def saturate(values, dtype):
    """What the core stores for a scaled integer: rounded toward zero, saturated (NaN: 0)."""
    info = np.iinfo(dtype)
    v = np.nan_to_num(np.trunc(values), nan=0.0, posinf=info.max, neginf=info.min)
    return np.clip(v, info.min, info.max)


def wrap(values, dtype):
    return np.asarray(values, dtype=np.int64).astype(dtype).astype(np.float64)


def reduce_model(inputs, dtype, op, pre, post, n):
    """(expected, magnitude) of a reduction of `inputs` (one array per member,
    float64) as the core computes it: Average is a Sum with 1/n in the
    postscale (the prescale for half types); integers scale in double,
    truncate and saturate, and sum and multiply with wrap-around."""
    if op == "Average":
        if dtype in ("float16", "bfloat16"):
            pre = pre / n
        else:
            post = post / n
    fold = {"Average": np.add, "Sum": np.add, "Min": np.minimum, "Max": np.maximum, "Product": np.multiply}[op]
    if dtype in INTS:
        xs = [saturate(x * pre, dtype) if pre != 1.0 else x for x in inputs]
        acc = xs[0]
        for x in xs[1:]:
            acc = fold(acc, x)
        if op in ("Average", "Sum", "Product"):
            acc = wrap(acc, dtype)
        return (saturate(acc * post, dtype) if post != 1.0 else acc), 0
    xs = [x * pre for x in inputs]
    acc, mag = xs[0], np.abs(xs[0])
    for x in xs[1:]:
        acc = fold(acc, x)
        mag = mag * np.abs(x) if op == "Product" else mag + np.abs(x)
    return acc * post, mag * abs(post)
