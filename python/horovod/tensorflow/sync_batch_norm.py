"""SyncBatchNormalization: batch normalization whose batch statistics are those of the
global batch (every rank's), as Horovod's. Works on Keras 3 (TensorFlow's default tf.keras)
and on tf-keras (Keras 2, TF_USE_LEGACY_KERAS=1), whose BatchNormalization layers compute the
moments in differently named methods."""
import tensorflow as tf

from horovod.tensorflow.mpi_ops import Sum, _allreduce, size


def _global_moments(inputs, axes, keepdims):
    """Mean and variance over `axes` of every rank's `inputs`: one allreduce of the local
    count, sum and sum of squares (in float32 at least, for float16 inputs)."""
    dtype = inputs.dtype
    x = tf.cast(inputs, tf.float32) if dtype in (tf.float16, tf.bfloat16) else inputs
    count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
    local_sum = tf.reduce_sum(x, axis=axes, keepdims=True)
    local_sq = tf.reduce_sum(tf.square(x), axis=axes, keepdims=True)
    shape = tf.shape(local_sum)
    packed = tf.concat([tf.reshape(count, [1]), tf.reshape(local_sum, [-1]),
                        tf.reshape(local_sq, [-1])], axis=0)
    packed = _allreduce(packed, op=Sum)
    n = tf.size(local_sum)
    total = packed[0]
    mean = tf.reshape(packed[1:1 + n], shape) / total
    var = tf.reshape(packed[1 + n:], shape) / total - tf.square(mean)
    var = tf.maximum(var, 0.0)
    if not keepdims:
        mean = tf.squeeze(mean, axis=axes)
        var = tf.squeeze(var, axis=axes)
    return tf.cast(mean, dtype), tf.cast(var, dtype)


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """Batch normalization over the global batch: in training, the mean and variance are the
    whole job's (the ranks' inputs taken together); in inference, the moving statistics, as
    in BatchNormalization."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        import inspect
        if "fused" in inspect.signature(super().__init__).parameters:
            kwargs["fused"] = fused  # tf-keras; Keras 3 has no such argument
        super().__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        # Keras 3 calls _moments(inputs, mask); tf-keras _moments(inputs, reduction_axes,
        # keep_dims, mask=None), which goes through _calculate_mean_and_var below.
        keras2 = len(args) >= 2 or "keep_dims" in kwargs or "reduction_axes" in kwargs
        mask = kwargs.get("mask", args[0] if len(args) == 1 else None)
        if keras2 or mask is not None or size() == 1:
            return super()._moments(inputs, *args, **kwargs)
        return _global_moments(inputs, list(self._reduction_axes), keepdims=False)

    # tf-keras (Keras 2)
    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
        if mask is not None or size() == 1:
            return super()._calculate_mean_and_var(inputs, reduction_axes, keep_dims, mask=mask)
        return _global_moments(inputs, list(reduction_axes), keep_dims)
