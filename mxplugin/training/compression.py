"""Gradient compression for allreduce, as horovod.mxnet: Compression.none,
Compression.fp16 and Compression.bf16 (float gradients travel as float16 or
bfloat16), and for DistributedTrainer Compression.powersgd(rank=...)
(low-rank factors with error feedback: its settings here, the reduction in
powersgd.py)."""
import numpy as np

from mxplugin.errors import ArgumentError
from mxplugin.ops import BFLOAT16


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _is_float(dtype):
    return dtype == BFLOAT16 or np.dtype(dtype).kind == "f"


class FP16Compressor(Compressor):
    wire = "float16"

    @classmethod
    def compress(cls, tensor):
        original = tensor.dtype
        if _is_float(original):
            return tensor.astype(cls.wire, copy=False), original
        return tensor, original

    @staticmethod
    def decompress(tensor, ctx):
        if _is_float(ctx):
            return tensor.astype(ctx, copy=False)
        return tensor


class BF16Compressor(FP16Compressor):
    """bfloat16 keeps float32's exponent range (no overflow where float16
    would need gradient_predivide_factor) and 8 bits of its mantissa."""
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
    """How DistributedTrainer sends each gradient bucket (horovod.mxnet's
    name): `Compression.none` (as it is, the default), `Compression.fp16`
    and `Compression.bf16` (cast for the allreduce, cast back after), or
    `Compression.powersgd(rank=...)` (low-rank factors with error feedback)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def powersgd(rank=4, warmup_steps=0, min_compression_rate=2.0):
        """For DistributedTrainer: every gradient that is a matrix (a conv
        kernel as out_channels x the rest) of at least min_compression_rate
        times the size of its two rank-`rank` factors is sent as the factors,
        with error feedback, after `warmup_steps` uncompressed steps; the
        other gradients are sent as they are (Note [PowerSGD step] in
        powersgd.py)."""
        return PowerSGD(rank, warmup_steps, min_compression_rate)
