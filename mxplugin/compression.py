"""Gradient compression for allreduce, as horovod.mxnet: Compression.none,
Compression.fp16 and Compression.bf16 (float gradients travel as float16 or
bfloat16), and for DistributedTrainer Compression.powersgd(rank=...)
(low-rank factors with error feedback, powersgd.py)."""
import numpy as np

# MXNet 1.9.1's bfloat16: NumPy has no such type, MXNet names it by this dtype.
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])


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


class Compression:
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
        from mxplugin.powersgd import PowerSGD

        return PowerSGD(rank, warmup_steps, min_compression_rate)
