"""Horovod's Keras API for TensorFlow on hvd: `import horovod.tensorflow.keras as hvd`.

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), ...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

Works with the Keras that tf.keras is: Keras 3 (TensorFlow's default) or tf-keras (Keras 2,
with TF_USE_LEGACY_KERAS=1), and with their optimizers of either generation.
"""
import tensorflow as tf

from horovod import _keras as _impl
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                         remove_process_set)
from horovod.tensorflow import (Adasum, Average, Compression, Max, Min, Product, Sum,
                                ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                                local_rank, local_size, mpi_built, mpi_enabled,
                                mpi_threads_supported, nccl_built, rank, rocm_built, shutdown,
                                size, start_timeline, stop_timeline)
from horovod.tensorflow import _check_optimizer_args
from horovod.tensorflow import allgather as _allgather
from horovod.tensorflow import allreduce as _allreduce
from horovod.tensorflow import broadcast as _broadcast
from horovod.tensorflow import broadcast_global_variables as _broadcast_global_variables
from horovod.tensorflow import reducescatter as _reducescatter
from horovod.tensorflow.keras import callbacks, elastic  # noqa: F401
from horovod.tensorflow.mpi_ops import handle_average_backwards_compatibility

keras = tf.keras


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """`optimizer` (a Keras optimizer) whose gradients are averaged (op) over the process set
    before they are applied; with backward_passes_per_step > 1, summed locally over that many
    steps first (averaged over them with average_aggregated_gradients)."""
    if op == Adasum:
        raise ValueError('op == Adasum is not supported yet with Keras')
    groups = _check_optimizer_args(op, gradient_predivide_factor, average_aggregated_gradients,
                                   num_groups, groups)
    return _impl.create_distributed_optimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set,
                                local_layers=None, scale_local_gradients=True):
    """A DistributedOptimizer whose `local_layers`' variables keep their own gradients."""
    opt = DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                               device_sparse=device_sparse, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               backward_passes_per_step=backward_passes_per_step,
                               average_aggregated_gradients=average_aggregated_gradients,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for var in _impl.local_variables_of(local_layers):
        opt.register_local_var(var)
    return opt


def _value(tensor):
    """Eagerly the tensor itself; in a TensorFlow 1 graph, its value (the session runs it)."""
    if tf.executing_eagerly():
        return tensor
    return tf.compat.v1.keras.backend.get_session().run(tensor)


def broadcast_global_variables(root_rank):
    """TensorFlow 1 graphs: give every global variable root_rank's value now."""
    return _value(_broadcast_global_variables(root_rank))


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """`value` (a tensor, array or number) reduced over every rank (Average by default)."""
    op = handle_average_backwards_compatibility(op, average)
    return _value(_allreduce(tf.constant(value, name=name), op=op, name=name,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             compression=compression))


def allgather(value, name=None):
    """Every rank's `value` concatenated along the first dimension."""
    return _value(_allgather(tf.constant(value, name=name), name=name))


def broadcast(value, root_rank, name=None):
    """root_rank's `value` on every rank."""
    return _value(_broadcast(tf.constant(value, name=name), root_rank, name=name))


def reducescatter(value, name=None, op=Average):
    """`value` reduced over every rank, this rank's part of the first dimension."""
    return _value(_reducescatter(tf.constant(value, name=name), op=op, name=name))


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """keras.models.load_model with the saved optimizer wrapped in DistributedOptimizer (the
    model's variables as saved; broadcast them if ranks load different files)."""
    def wrap_optimizer(cls):
        return _impl.distributed_class(cls, compression=compression)

    modules = [keras.optimizers]
    if legacy_opts and hasattr(keras.optimizers, "legacy"):
        modules = [keras.optimizers.legacy]
    return _impl.load_model(keras, wrap_optimizer, modules, filepath, custom_optimizers,
                            custom_objects)
