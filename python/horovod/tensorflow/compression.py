"""Gradient compression of horovod.tensorflow: what is sent is compressed, what arrives is
decompressed to the original type (Horovod's Compression.none and Compression.fp16)."""
import tensorflow as tf


class Compressor:
    """compress(tensor) -> (compressed, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes), others as they are."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating:
            return tf.cast(tensor, dtype=tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        dtype = ctx
        if dtype is not None and dtype.is_floating and tensor.dtype != dtype:
            return tf.cast(tensor, dtype=dtype)
        return tensor


class Compression:
    """The compressors by name: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
