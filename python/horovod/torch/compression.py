"""Gradient compression for the wire: what DistributedOptimizer and allreduce accept as
`compression=`."""
import torch


class Compressor:
    """Compress a tensor before a collective and restore it after."""

    @staticmethod
    def compress(tensor):
        """Returns (tensor for the wire, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 (half the bytes) and come back in their own
    dtype; other tensors are left alone."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None or tensor.dtype == ctx else tensor.type(ctx)


class Compression:
    """The compressors: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
