"""Local gradient aggregation (backward_passes_per_step > 1): gradients are summed in local
variables for that many steps, and only every backward_passes_per_step-th step reduces them
over the ranks and applies them. Used by the tf.compat.v1 and the Keras DistributedOptimizer,
in graphs and in tf.function (the branch is a tf.cond on a step counter every rank keeps
alike, so every rank takes part in the same collectives)."""
import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.util import _var_key


def apply_op_to_not_none_tensors(tensor_op, tensors, *args):
    return [tensor_op(t, *args) if t is not None else t for t in tensors]


def get_not_none_from_list(tensor_list):
    return [t for t in tensor_list if t is not None]


class LocalGradientAggregationHelper:
    """Accumulates gradients locally and reduces them every `backward_passes_per_step`
    steps through `allreduce_func(grads, vars)`."""

    _OPTIMIZER_TYPE_KERAS = "optimizer_type_keras"
    _OPTIMIZER_TYPE_LEGACY = "optimizer_type_legacy"

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense,
                 average_aggregated_gradients, rank, optimizer_type,
                 process_set=global_process_set, scale_local_gradients=True):
        if backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_grads = allreduce_func
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.rank = rank
        self.optimizer_type = optimizer_type
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.counter = None
        self.locally_aggregated_grads = {}
        self._local_vars = set()
        self.not_none_indexes = {}
        self.num_none_grad_updates = 0

    def register_local_var(self, var):
        self._local_vars.add(_var_key(var))

    def _is_local(self, var):
        return _var_key(var) in self._local_vars

    def _init_aggregation_vars(self, grads):
        with tf.init_scope():
            if self.counter is None:
                self.counter = tf.Variable(0, dtype=tf.int32, trainable=False,
                                           name="aggregation_counter",
                                           synchronization=tf.VariableSynchronization.ON_READ,
                                           aggregation=tf.VariableAggregation.NONE)
            for i, g in enumerate(grads):
                if g is None or i in self.locally_aggregated_grads:
                    continue
                self.not_none_indexes[i] = len(self.not_none_indexes)
                self.locally_aggregated_grads[i] = tf.Variable(
                    tf.zeros(g.shape, dtype=g.dtype), trainable=False,
                    name=f"aggregation_variable_{i}",
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.NONE)

    def _dense(self, g):
        if isinstance(g, tf.IndexedSlices):
            return tf.convert_to_tensor(g)
        return g

    def _due(self):
        """Whether this step completes a cycle (the counter counts the steps of the cycle;
        applying resets it to 0)."""
        return tf.equal(self.counter, self.backward_passes_per_step)

    def compute_gradients(self, grads, vars):
        """Add this step's gradients to the local sums; on every backward_passes_per_step-th
        step, return the sums reduced over the ranks (averaged over the steps when
        average_aggregated_gradients), otherwise the sums as they are (not applied)."""
        grads = [self._dense(g) for g in grads]
        self._init_aggregation_vars(grads)
        updates = [self.locally_aggregated_grads[i].assign_add(g)
                   for i, g in enumerate(grads) if g is not None]
        with tf.control_dependencies(updates):
            counted = self.counter.assign_add(1)

        def reduce_sums():
            sums = [self.locally_aggregated_grads[i].read_value() if g is not None else None
                    for i, g in enumerate(grads)]
            if self.average_aggregated_gradients:
                sums = [s / tf.cast(self.backward_passes_per_step, s.dtype)
                        if s is not None else None for s in sums]
            glob = [i for i, v in enumerate(vars) if not self._is_local(v)]
            reduced = self._allreduce_grads([sums[i] for i in glob], [vars[i] for i in glob])
            out = list(sums)
            for i, r in zip(glob, reduced):
                out[i] = r
            if self.scale_local_gradients and len(glob) < len(out):
                # local variables' sums are this rank's alone: scaled as the reduced ones
                n = self.process_set.size()
                for i in set(range(len(out))) - set(glob):
                    if out[i] is not None:
                        out[i] = out[i] / tf.cast(n, out[i].dtype)
            return [o if o is not None else tf.zeros([]) for o in out]

        def keep_sums():
            return [self.locally_aggregated_grads[i].read_value() if g is not None
                    else tf.zeros([]) for i, g in enumerate(grads)]

        with tf.control_dependencies([counted]):
            out = tf.cond(self._due(), reduce_sums, keep_sums)
        return [o if g is not None else None for o, g in zip(out, grads)]

    def _clear(self):
        return [v.assign(tf.zeros_like(v)) for v in self.locally_aggregated_grads.values()] + \
            [self.counter.assign(0)]

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        """Apply (through apply_grads_closure) and clear the sums on the steps that reduced
        them; do nothing on the others."""
        def apply():
            applied = apply_grads_closure()
            deps = [applied] if isinstance(applied, (tf.Tensor, tf.Operation)) else []
            with tf.control_dependencies(deps):
                with tf.control_dependencies(self._clear()):
                    return tf.constant(True)

        def skip():
            return tf.constant(False)

        result = tf.cond(self._due(), apply, skip)
        if self.optimizer_type == self._OPTIMIZER_TYPE_LEGACY and not tf.executing_eagerly():
            return tf.group(result)
        return result
