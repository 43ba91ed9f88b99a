"""Gradient compression for allreduce, as horovod.mxnet: Compression.none,
Compression.fp16 and Compression.bf16 (float gradients travel as float16 or
bfloat16), and for DistributedTrainer Compression.powersgd(rank=...)
(low-rank factors with error feedback: its settings here, the reduction in
powersgd.py)."""
import numpy as np

from mxplugin.errors import ArgumentError
from mxplugin.ops import BFLOAT16


class Compressor:
    """How an array travels: ``compress(tensor)`` gives what is sent and a
    context, ``decompress(sent, ctx)`` the array again (Horovod's
    interface)."""

    @staticmethod
    def compress(tensor):
        """``(sent, ctx)``: the array to send for `tensor`, and what
        decompress() needs to restore it."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """The array `tensor` (what was sent, reduced) stands for, from
        compress()'s `ctx`."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """``Compression.none``: arrays travel as they are (the default).

    Horovod: ``hvd.Compression.none``, the same."""

    @staticmethod
    def compress(tensor):
        """``(tensor, None)``: `tensor` itself."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """`tensor` itself."""
        return tensor


def _is_float(dtype):
    return dtype == BFLOAT16 or np.dtype(dtype).kind == "f"


class FP16Compressor(Compressor):
    """``Compression.fp16``: float arrays travel as float16 and are cast back
    to their type after the reduction; other types travel as they are.

    Horovod: ``hvd.Compression.fp16``, the same."""

    wire = "float16"

    @classmethod
    def compress(cls, tensor):
        """``(sent, dtype)``: a float `tensor` cast to the wire type, and its own type."""
        original = tensor.dtype
        if _is_float(original):
            return tensor.astype(cls.wire, copy=False), original
        return tensor, original

    @staticmethod
    def decompress(tensor, ctx):
        """`tensor` cast back to the type ``ctx`` compress() gave."""
        if _is_float(ctx):
            return tensor.astype(ctx, copy=False)
        return tensor


class BF16Compressor(FP16Compressor):
    """``Compression.bf16``: float arrays travel as bfloat16, which keeps
    float32's exponent range (no overflow where float16 would need
    ``gradient_predivide_factor``) and 8 bits of its mantissa.

    Horovod: none (mxplugin's own)."""
    wire = BFLOAT16


class PowerSGD(NoneCompressor):
    """What Compression.powersgd() returns: the settings of the compression.
    As a per-tensor compressor (the trainer's uncompressed buckets, or
    allreduce) it sends tensors as they are."""

    def __init__(self, rank=4, warmup_steps=0, min_compression_rate=2.0):
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise ArgumentError(f"Compression.powersgd: rank must be an int >= 1, got {rank!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
            raise ArgumentError(f"Compression.powersgd: warmup_steps must be an int >= 0, got {warmup_steps!r}")
        if isinstance(min_compression_rate, bool) or not isinstance(min_compression_rate, (int, float)) \
                or not min_compression_rate >= 0:
            raise ArgumentError("Compression.powersgd: min_compression_rate must be a number >= 0, got "
                                f"{min_compression_rate!r}")
        self.rank = int(rank)
        self.warmup_steps = int(warmup_steps)
        self.min_compression_rate = float(min_compression_rate)

    def __repr__(self):
        return (f"Compression.powersgd(rank={self.rank}, warmup_steps={self.warmup_steps}, "
                f"min_compression_rate={self.min_compression_rate})")

    def matrix_shape(self, shape):
        """(rows, cols) of a gradient of `shape` seen as a matrix (first
        dimension x the rest), or None when it is not compressed: a vector,
        or a matrix whose factors would not be min_compression_rate times
        smaller than it."""
        if len(shape) < 2:
            return None
        rows, cols = int(shape[0]), int(np.prod(shape[1:]))
        r = min(self.rank, rows, cols)
        if rows * cols < self.min_compression_rate * (rows + cols) * r:
            return None
        return rows, cols

    def compresses(self, param):
        """Whether `param`'s gradient is compressed (dtype float16/32/64)."""
        return np.dtype(param.dtype).name in ("float16", "float32", "float64") and \
            self.matrix_shape(param.shape) is not None


class Compression:
    """How DistributedTrainer sends each gradient bucket (its
    ``compression`` argument): ``Compression.none`` (as it is, the default),
    ``Compression.fp16`` and ``Compression.bf16`` (cast for the allreduce,
    cast back after), or ``Compression.powersgd(rank=...)`` (low-rank
    factors with error feedback). ``none``, ``fp16`` and ``bf16`` are
    compressors of their own (``compress(tensor)`` gives ``(sent, ctx)``,
    ``decompress(sent, ctx)`` the array), as in Horovod.

    Horovod: ``hvd.Compression``, with ``none`` and ``fp16``; ``bf16`` and
    ``powersgd()`` are mxplugin's own.

    Examples
    --------
    >>> import mxnet as mx, mxplugin as hvd
    >>> hvd.init()
    >>> sent, ctx = hvd.Compression.fp16.compress(mx.nd.ones(2))
    >>> sent.dtype.__name__, hvd.Compression.fp16.decompress(sent, ctx).dtype.__name__
    ('float16', 'float32')
    >>> net = mx.gluon.nn.Dense(1, in_units=2)
    >>> net.initialize()
    >>> trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", compression=hvd.Compression.bf16)
    >>> hvd.Compression.powersgd(rank=2)
    Compression.powersgd(rank=2, warmup_steps=0, min_compression_rate=2.0)
    """

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def powersgd(rank=4, warmup_steps=0, min_compression_rate=2.0):
        """For DistributedTrainer: every gradient that is a matrix (a conv
        kernel as out_channels x the rest) of at least min_compression_rate
        times the size of its two rank-`rank` factors is sent as the factors,
        with error feedback, after `warmup_steps` uncompressed steps; the
        other gradients are sent as they are. Not with local SGD or sharded
        optimizer states.

        Horovod: none (mxplugin's own; PyTorch's DDP has a PowerSGD hook).

        Parameters
        ----------
        rank : int, default 4
            The rank of the factors (at least 1): a gradient of m x n rows
            and columns travels as m x r and n x r.
        warmup_steps : int, default 0
            Steps whose gradients are sent uncompressed first.
        min_compression_rate : float, default 2.0
            A matrix is compressed only where its factors are at least this
            many times smaller than it; smaller ones are sent as they are.

        Returns
        -------
        PowerSGD
            The settings, for ``DistributedTrainer(..., compression=...)``.

        Raises
        ------
        ArgumentError
            A ``rank`` that is not an int of at least 1, ``warmup_steps``
            not an int of at least 0, ``min_compression_rate`` not a number
            of at least 0.
        """
        return PowerSGD(rank, warmup_steps, min_compression_rate)
