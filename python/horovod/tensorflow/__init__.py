"""Horovod's TensorFlow API on hvd: `import horovod.tensorflow as hvd`.

    hvd.init()
    tape = hvd.DistributedGradientTape(tape)          # TensorFlow 2
    opt = hvd.DistributedOptimizer(opt)               # Keras or tf.compat.v1 optimizers
    hvd.broadcast_variables(model.variables, root_rank=0)

The collectives are TensorFlow ops with C kernels (horovod/tensorflow/mpi_lib, built against
the installed TensorFlow) over libhvd: eagerly and inside tf.function, CPU tensors, every
name of Horovod 0.28.1's horovod.tensorflow.
"""
import warnings

import tensorflow as tf

from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                         remove_process_set)
from horovod.common.util import split_list
from horovod.tensorflow import elastic  # noqa: F401
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.functions import (allgather_object, broadcast_object,
                                          broadcast_object_fn, broadcast_variables)
from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
from horovod.tensorflow.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, _allreduce,
                                        _grouped_allreduce, _grouped_reducescatter,
                                        _reducescatter, allgather, alltoall, barrier, broadcast,
                                        broadcast_, ccl_built, check_num_rank_power_of_2,
                                        cross_rank, cross_size, cuda_built, ddl_built,
                                        gloo_built, gloo_enabled, grouped_allgather,
                                        handle_average_backwards_compatibility, init,
                                        is_homogeneous, is_initialized, join, local_rank,
                                        local_rank_op, local_size, local_size_op, mpi_built,
                                        mpi_enabled, mpi_threads_supported, nccl_built,
                                        process_set_included_op, rank, rank_op, rocm_built,
                                        shutdown, size, size_op, start_timeline, stop_timeline)
from horovod.tensorflow.sync_batch_norm import SyncBatchNormalization
from horovod.tensorflow.util import (_cache, _executing_eagerly, _make_subgraph,  # noqa: F401
                                     _var_key, refs_to_vars, vars_to_refs)

try:
    _LegacyOptimizer = tf.compat.v1.train.Optimizer
except AttributeError:  # pragma: no cover
    _LegacyOptimizer = None


def _scaled(grad, factor):
    """grad * factor, for dense tensors and IndexedSlices alike."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype), grad.indices,
                                dense_shape=grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


def _set_size(process_set):
    n = process_set.size()
    if n is None:
        raise ValueError(f"{process_set} is not registered")
    return n


def _sparse_allreduce(tensor, op, name, process_set, ignore_name_scope):
    """An IndexedSlices reduced as Horovod does: every rank's values and indices gathered
    (the rows of equal indices add up when the slices are applied)."""
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction does not currently support sparse "
                                  "tensors. As a workaround please pass sparse_as_dense=True "
                                  "to DistributedOptimizer")
    if op not in (Average, Sum):
        raise NotImplementedError("Only Sum and Average are supported for sparse tensors")
    vname = None if name is None else f"{name}.values"
    iname = None if name is None else f"{name}.indices"
    values = allgather(tensor.values, name=vname, ignore_name_scope=ignore_name_scope,
                       process_set=process_set)
    indices = allgather(tensor.indices, name=iname, ignore_name_scope=ignore_name_scope,
                        process_set=process_set)
    if op == Average:
        values = values / tf.cast(_set_size(process_set), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)


def _no_sparse_scaling(prescale_factor, postscale_factor):
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscaling is not supported with tf.IndexedSlices")


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Reduce `tensor` over every rank of the process set (op: Average by default, Sum, Min,
    Max, Product, Adasum). A tf.IndexedSlices is gathered instead (Average or Sum).
    `device_dense`/`device_sparse` are accepted for Horovod's signature (CPU only here)."""
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _no_sparse_scaling(prescale_factor, postscale_factor)
        return _sparse_allreduce(tensor, op, name, process_set, ignore_name_scope)
    compressed, ctx = compression.compress(tensor)
    reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                         process_set=process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """allreduce of every tensor of `tensors`, negotiated and fused as one group (one group
    per dtype: a TensorFlow op takes one type)."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    results = [None] * len(tensors)
    dense = {}
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            _no_sparse_scaling(prescale_factor, postscale_factor)
            sname = None if name is None else f"{name}.{i}"
            results[i] = _sparse_allreduce(t, op, sname, process_set, ignore_name_scope)
        else:
            dense.setdefault(tf.as_dtype(t.dtype), []).append(i)
    for g, idx in enumerate(dense.values()):
        compressed, ctxs = zip(*[compression.compress(tensors[i]) for i in idx])
        gname = name if name is None or len(dense) == 1 else f"{name}.{g}"
        reduced = _grouped_allreduce(list(compressed), name=gname, op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     ignore_name_scope=ignore_name_scope, process_set=process_set)
        for i, r, c in zip(idx, reduced, ctxs):
            results[i] = compression.decompress(r, c)
    return results


def _check_scatter_op(op):
    if op not in (Average, Sum):
        raise NotImplementedError("Reducescatter currently only supports AVERAGE and SUM.")


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """`tensor` reduced over the process set (Average or Sum), split along the first
    dimension: rank r gets its part (the first ranks one row more when it does not divide)."""
    _check_scatter_op(op)
    if isinstance(tensor, tf.IndexedSlices):
        raise NotImplementedError("reducescatter does not support sparse tensors")
    compressed, ctx = compression.compress(tensor)
    out = _reducescatter(compressed, name=name, op=op, ignore_name_scope=ignore_name_scope,
                         process_set=process_set, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of every tensor of `tensors`, negotiated together."""
    _check_scatter_op(op)
    tensors = list(tensors)
    if not tensors:
        return []
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    outs = _grouped_reducescatter(list(compressed), op=op, process_set=process_set,
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def broadcast_global_variables(root_rank):
    """The op that gives every global variable root_rank's value (TensorFlow 1 graphs; in
    eager mode use hvd.broadcast_variables with the model's and optimizer's variables)."""
    if _executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A SessionRunHook that broadcasts root_rank's global variables once the session is
    created (tf.compat.v1.train.MonitoredTrainingSession and Estimators)."""

    def __init__(self, root_rank, device=''):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


# ---- the gradients' allreduce, shared by the optimizers and the tapes ----

def _group_indices(grads, variables, groups):
    """The gradients' indices in the groups to reduce together: `groups` an int (that many
    groups of consecutive gradients) or lists of variables (each list one group, the rest
    alone); None: one group of all."""
    idx = [i for i, g in enumerate(grads) if g is not None]
    if groups is None:
        return [idx]
    if isinstance(groups, int):
        return [part for part in split_list(idx, groups) if part]
    by_ref = {}
    for i in idx:
        if variables is not None:
            by_ref[_var_key(variables[i])] = i
    out, taken = [], set()
    for group in groups:
        part = [by_ref[_var_key(v)] for v in group if _var_key(v) in by_ref]
        if part:
            out.append(part)
            taken.update(part)
    out.extend([i] for i in idx if i not in taken)
    return out


def _reduce_parts_fn(name, compression, op, gradient_predivide_factor, process_set):
    """reduce(grads, parts, use_generic_names): each part (a tuple of indices into grads) one
    grouped allreduce; the reduced gradients, None where grads has None."""
    if op == Average and gradient_predivide_factor != 1.0:
        # divide before the sum and the rest after it (Horovod's gradient_predivide_factor)
        op_, pre = Sum, 1.0 / gradient_predivide_factor
    else:
        op_, pre = op, 1.0

    def reduce(grads, parts, use_generic_names):
        post = gradient_predivide_factor / _set_size(process_set) if op_ != op else 1.0
        out = [None] * len(grads)
        with tf.name_scope(name + "_Allreduce"):
            for gi, part in enumerate(parts):
                gname = f"{name}_Allreduce_grad_{gi}" if use_generic_names else None
                reduced = grouped_allreduce([grads[i] for i in part], op=op_,
                                            compression=compression, prescale_factor=pre,
                                            postscale_factor=post, process_set=process_set,
                                            name=gname)
                for i, r in zip(part, reduced):
                    out[i] = r
        return out

    return reduce


@_cache
def _cached_reduce_parts_fn(name, compression, op, gradient_predivide_factor, process_set):
    fn = _reduce_parts_fn(name, compression, op, gradient_predivide_factor, process_set)
    # Eagerly, one tf.function for the whole set of gradients: their allreduces start
    # together and are negotiated and fused together, instead of one eager round trip each.
    # (Only the gradients cross into it; the grouping is a Python value of its signature.)
    return _make_subgraph(fn) if _executing_eagerly() else fn


def _allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                        gradient_predivide_factor, groups, process_set):
    """allreduce_grads(grads, vars=None, use_generic_names=False): the gradients reduced over
    the process set (None stays None), grouped as `groups` says."""

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        parts = tuple(tuple(p) for p in _group_indices(grads, vars, groups))
        reduce = _cached_reduce_parts_fn(name, compression, op, gradient_predivide_factor,
                                         process_set)
        return reduce(grads, parts, use_generic_names)

    return allreduce_grads


def _check_optimizer_args(op, gradient_predivide_factor, average_aggregated_gradients,
                          num_groups, groups):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if op == Adasum and average_aggregated_gradients:
        raise ValueError('Adasum does not support average_aggregated_gradients == True')
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed '
                      'in v0.23.0.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError('groups should be a non-negative integer or a list of list of '
                         'tf.Variable.')
    return groups


if _LegacyOptimizer is not None:
    class _DistributedOptimizer(_LegacyOptimizer):
        """A tf.compat.v1 optimizer whose compute_gradients returns the gradients reduced
        over the ranks (backward_passes_per_step > 1: accumulated locally first)."""

        def __init__(self, optimizer, name=None, use_locking=False, device_dense='',
                     device_sparse='', compression=Compression.none, sparse_as_dense=False,
                     op=Average, gradient_predivide_factor=1.0, backward_passes_per_step=1,
                     average_aggregated_gradients=False, groups=None,
                     process_set=global_process_set, scale_local_gradients=True):
            if name is None:
                name = "Distributed{}".format(type(optimizer).__name__)
            super().__init__(name=name, use_locking=use_locking)
            self._optimizer = optimizer
            self._allreduce_grads = _allreduce_grads_fn(
                name, device_dense, device_sparse, compression, sparse_as_dense, op,
                gradient_predivide_factor, groups, process_set)
            self._local_vars = set()
            self.process_set = process_set
            self.scale_local_gradients = scale_local_gradients
            self._agg_helper = None
            if backward_passes_per_step > 1:
                if _executing_eagerly():
                    raise ValueError("backward_passes_per_step > 1 is not supported yet with "
                                     "eager mode.")
                self._agg_helper = LocalGradientAggregationHelper(
                    backward_passes_per_step=backward_passes_per_step,
                    allreduce_func=self._allreduce_grads,
                    sparse_as_dense=sparse_as_dense,
                    average_aggregated_gradients=average_aggregated_gradients,
                    rank=rank(), optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY,
                    process_set=process_set)

        def register_local_var(self, var):
            """A variable whose gradient stays this rank's (not reduced)."""
            if _var_key(var) in self._local_vars:
                return
            self._local_vars.add(_var_key(var))
            if self._agg_helper:
                self._agg_helper.register_local_var(var)

        def compute_gradients(self, *args, **kwargs):
            gradients = self._optimizer.compute_gradients(*args, **kwargs)
            grads, variables = zip(*gradients)
            if self._agg_helper:
                avg_grads = self._agg_helper.compute_gradients(grads, variables)
            else:
                avg_grads = self._reduce(grads, variables)
            return list(zip(avg_grads, variables))

        def _reduce(self, grads, variables):
            if _set_size(self.process_set) <= 1 and not self._local_vars:
                return list(grads)
            glob = [i for i, v in enumerate(variables) if _var_key(v) not in self._local_vars]
            reduced = self._allreduce_grads([grads[i] for i in glob],
                                            [variables[i] for i in glob])
            out = list(grads)
            for i, r in zip(glob, reduced):
                out[i] = r
            if self.scale_local_gradients and self._local_vars:
                n = _set_size(self.process_set)
                for i, v in enumerate(variables):
                    if _var_key(v) in self._local_vars and out[i] is not None:
                        out[i] = _scaled(out[i], 1.0 / n)
            return out

        def apply_gradients(self, grads_and_vars, global_step=None, name=None):
            if self._agg_helper:
                return self._agg_helper.apply_gradients(
                    lambda: self._optimizer.apply_gradients(grads_and_vars, global_step, name),
                    self._optimizer, grads_and_vars, global_step=global_step, name=name)
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                   name=name)

        def get_slot(self, *args, **kwargs):
            return self._optimizer.get_slot(*args, **kwargs)

        def get_slot_names(self, *args, **kwargs):
            return self._optimizer.get_slot_names(*args, **kwargs)

        def variables(self, *args, **kwargs):
            return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='',
                         device_sparse='', compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wrap `optimizer` so that the gradients are averaged (op) over the process set before
    they are applied: a tf.compat.v1.train.Optimizer here, a Keras optimizer through
    horovod.tensorflow.keras.DistributedOptimizer."""
    groups = _check_optimizer_args(op, gradient_predivide_factor, average_aggregated_gradients,
                                   num_groups, groups)
    if _LegacyOptimizer is not None and isinstance(optimizer, _LegacyOptimizer):
        return _DistributedOptimizer(
            optimizer=optimizer, name=name, use_locking=use_locking, device_dense=device_dense,
            device_sparse=device_sparse, compression=compression,
            sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
    if op == Adasum:
        raise ValueError('op == Adasum is not supported yet with Keras')
    import horovod.tensorflow.keras as hvd_k
    return hvd_k.DistributedOptimizer(
        optimizer=optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, process_set=process_set,
        scale_local_gradients=scale_local_gradients)


class _DistributedGradientTape(tf.GradientTape):
    """The methods a DistributedGradientTape adds to the tape's own class."""

    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, groups, persistent=False,
                 watch_accessed_variables=True, process_set=global_process_set,
                 scale_local_gradients=True):
        if hasattr(tape, "_watch_accessed_variables"):
            super(self.__class__, self).__init__(persistent, tape._watch_accessed_variables)
        else:
            super(self.__class__, self).__init__(persistent)
        self._tape = tape._tape
        self._recording = getattr(tape, "_recording", False)
        self._persistent = persistent
        self._allreduce_grads = _allreduce_grads_fn(
            "DistributedGradientTape", device_dense, device_sparse, compression,
            sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """A source (variable) whose gradient stays this rank's (model parallelism)."""
        self._local_sources.add(_var_key(source))

    def _split(self, sources):
        flat = tf.nest.flatten(sources)
        local = [i for i, s in enumerate(flat) if _var_key(s) in self._local_sources]
        return flat, local

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        """The gradients, reduced over the process set except those of local sources
        (divided by the set's size when scale_local_gradients)."""
        grads = super(self.__class__, self).gradient(target, sources, output_gradients)
        flat_grads = tf.nest.flatten(grads)
        flat_sources, local = self._split(sources)
        n = _set_size(self.process_set)
        if n > 1 or local:
            glob = [i for i in range(len(flat_grads)) if i not in set(local)]
            reduced = self._allreduce_grads([flat_grads[i] for i in glob],
                                            [flat_sources[i] for i in glob], use_generic_names)
            out = list(flat_grads)
            for i, r in zip(glob, reduced):
                out[i] = r
            if self.scale_local_gradients:
                for i in local:
                    if out[i] is not None:
                        out[i] = _scaled(out[i], 1.0 / n)
            flat_grads = out
        return tf.nest.pack_sequence_as(grads, flat_grads)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """(local, global): lists of (variable, gradient) for the local sources and the
        others, computed as gradient() does."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local_pairs, global_pairs = [], []
        for s, g in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            (local_pairs if _var_key(s) in self._local_sources else global_pairs).append((s, g))
        return local_pairs, global_pairs


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wrap a tf.GradientTape so that gradient() returns the gradients averaged (op) over the
    process set."""
    groups = _check_optimizer_args(op, gradient_predivide_factor, False, num_groups, groups)
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,),
               dict(_DistributedGradientTape.__dict__))
    persistent = getattr(gradtape, "_persistent", False)
    tape = cls(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
               gradient_predivide_factor, groups, persistent, process_set=process_set,
               scale_local_gradients=scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """A DistributedGradientTape whose `local_layers`' variables keep their own gradients."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    if local_layers is None:
        return tape
    if isinstance(local_layers, tf.keras.layers.Layer) or hasattr(local_layers, "trainable_weights"):
        local_layers = [local_layers]
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
