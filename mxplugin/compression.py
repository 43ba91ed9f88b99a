"""Gradient compression for allreduce, as horovod.mxnet: Compression.none and
Compression.fp16 (float gradients travel as float16)."""


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


class FP16Compressor(Compressor):
    @staticmethod
    def compress(tensor):
        original = tensor.dtype
        if "float" in str(original):
            return tensor.astype("float16", copy=False), original
        return tensor, original

    @staticmethod
    def decompress(tensor, ctx):
        if "float" in str(ctx):
            return tensor.astype(ctx, copy=False)
        return tensor


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
