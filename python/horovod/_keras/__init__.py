"""What horovod.tensorflow.keras and horovod.keras share: the distributed optimizer, made from
the optimizer's own class, for the three kinds of Keras optimizer TensorFlow users have today:

- Keras 3 (TensorFlow's default tf.keras, and `import keras`): the gradients are reduced in
  `apply(grads, variables)`, which apply_gradients and model.fit go through;
- tf-keras's optimizers (Keras 2, TF_USE_LEGACY_KERAS=1): reduced in compute_gradients /
  _compute_gradients / get_gradients when those compute them, otherwise in apply_gradients;
- tf-keras's legacy optimizers (tf.keras.optimizers.legacy): likewise.

The distributed class is a subclass of the optimizer's class named like it, so that
get_config/from_config round-trip, a saved model records the plain optimizer, and isinstance
checks keep working; Horovod's settings live on the class.
"""
import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow import _allreduce_grads_fn, _scaled, _set_size
from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
from horovod.tensorflow.mpi_ops import rank
from horovod.tensorflow.util import _var_key


def _is_keras3(optimizer_class):
    return any(c.__module__.startswith("keras.") or c.__module__ == "keras"
               for c in optimizer_class.__mro__ if c.__name__ == "Optimizer") and \
        hasattr(optimizer_class, "apply") and hasattr(optimizer_class, "stateless_apply")


def _hvd_compute(loss, var_list, grad_loss=None, tape=None):
    """The gradients of loss (a tensor, or a function computed here under the tape) with
    respect to var_list (a list, or a function returning one), and the list."""
    tape = tape if tape is not None else tf.GradientTape()
    if callable(loss):
        with tape:
            if not callable(var_list):
                tape.watch(var_list)
            loss = loss()
    if callable(var_list):
        var_list = var_list()
    var_list = tf.nest.flatten(var_list)
    return tape.gradient(loss, var_list, grad_loss), var_list


class _DistributedMixin:
    """The methods a distributed optimizer class adds to the optimizer's own class. Horovod's
    settings are the class attribute _hvd; per-instance state is created on first use (Keras
    builds instances through from_config, so there is no __init__ of ours to rely on)."""

    # ---- per-instance state ----

    def _hvd_state(self):
        st = self.__dict__.get("_hvd_st")
        if st is None:
            s = self._hvd
            st = {
                "allreduce": _allreduce_grads_fn(
                    s["name"], s["device_dense"], s["device_sparse"], s["compression"],
                    s["sparse_as_dense"], s["op"], s["gradient_predivide_factor"], s["groups"],
                    s["process_set"]),
                "local": set(),
                "reduced": False,  # set while tracing, between computing and applying
                "agg": None,
            }
            self.__dict__["_hvd_st"] = st
            if s["backward_passes_per_step"] > 1:
                st["agg"] = LocalGradientAggregationHelper(
                    backward_passes_per_step=s["backward_passes_per_step"],
                    allreduce_func=self._hvd_allreduce,
                    sparse_as_dense=s["sparse_as_dense"],
                    average_aggregated_gradients=s["average_aggregated_gradients"],
                    rank=rank(),
                    optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_KERAS,
                    process_set=s["process_set"],
                    scale_local_gradients=s["scale_local_gradients"])
        return st

    @property
    def _agg_helper(self):
        return self._hvd_state()["agg"]

    def register_local_var(self, var):
        """A variable whose gradient stays this rank's (not reduced; divided by the set's
        size when scale_local_gradients)."""
        self._hvd_state()["local"].add(_var_key(var))
        if self._agg_helper is not None:
            self._agg_helper.register_local_var(var)

    # ---- the reduction ----

    def _hvd_allreduce(self, grads, variables):
        """grads reduced over the process set, except the local variables' (scaled)."""
        st = self._hvd_state()
        s = self._hvd
        grads = list(grads)
        variables = list(variables)
        if s["sparse_as_dense"]:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        n = _set_size(s["process_set"])
        local = [i for i, v in enumerate(variables) if _var_key(v) in st["local"]]
        if n <= 1 and not local:
            return grads
        glob = [i for i in range(len(grads)) if i not in set(local)]
        out = list(grads)
        if glob:
            reduced = st["allreduce"]([grads[i] for i in glob], [variables[i] for i in glob])
            for i, r in zip(glob, reduced):
                out[i] = r
        if s["scale_local_gradients"]:
            for i in local:
                if out[i] is not None:
                    out[i] = _scaled(out[i], 1.0 / n)
        return out

    def _hvd_process(self, grads, variables):
        """The gradients to apply: reduced now, or aggregated locally and reduced every
        backward_passes_per_step steps."""
        agg = self._agg_helper
        if agg is not None:
            return agg.compute_gradients(list(grads), list(variables))
        return self._hvd_allreduce(grads, variables)

    def _hvd_reduced_pairs(self, grads, var_list):
        """(gradient, variable) pairs, the gradients processed; the next apply takes them as
        they are."""
        keep = [i for i, g in enumerate(grads) if g is not None]
        out = list(grads)
        reduced = self._hvd_process([grads[i] for i in keep], [var_list[i] for i in keep])
        for i, r in zip(keep, reduced):
            out[i] = r
        self._hvd_state()["reduced"] = True
        return list(zip(out, var_list))

    def _hvd_apply(self, apply_fn):
        """Run apply_fn, or with local aggregation only on the steps that reduced (the step
        counter advances on the others, so that iterations counts every step)."""
        agg = self._agg_helper
        if agg is None:
            return apply_fn()

        result = agg.apply_gradients(apply_fn, self)

        def count_skipped():
            self.iterations.assign_add(1)
            return tf.constant(True)

        tf.cond(result, lambda: tf.constant(True), count_skipped)
        return result


class _Keras3Mixin(_DistributedMixin):
    """Keras 3: everything goes through apply() (apply_gradients and model.fit too)."""

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """Horovod's (Keras 2's) private entry point, for scripts written against it: the
        reduced (gradient, variable) pairs, which apply_gradients then applies as they are."""
        grads, var_list = _hvd_compute(loss, var_list, grad_loss, tape)
        return self._hvd_reduced_pairs(grads, var_list)

    def apply(self, grads, trainable_variables=None):
        st = self._hvd_state()
        variables = trainable_variables if trainable_variables is not None else \
            self._trainable_variables
        grads = list(grads)
        variables = list(variables)
        if not st["reduced"]:
            keep = [i for i, g in enumerate(grads) if g is not None]
            reduced = self._hvd_process([grads[i] for i in keep], [variables[i] for i in keep])
            for i, r in zip(keep, reduced):
                grads[i] = r
        st["reduced"] = False
        parent = super(self._hvd_dist, self)
        return self._hvd_apply(lambda: parent.apply(grads, trainable_variables))


class _Keras2Mixin(_DistributedMixin):
    """tf-keras (Keras 2): reduce where the gradients are computed, else before applying."""

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        grads, var_list = _hvd_compute(loss, var_list, grad_loss, tape)
        return self._hvd_reduced_pairs(grads, var_list)

    def compute_gradients(self, loss, var_list, tape=None):
        grads, var_list = _hvd_compute(loss, var_list, None, tape)
        return self._hvd_reduced_pairs(grads, var_list)

    def get_gradients(self, loss, params):
        grads = super(self._hvd_dist, self).get_gradients(loss, params)
        return [g for g, _ in self._hvd_reduced_pairs(grads, list(params))]

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        st = self._hvd_state()
        pairs = list(grads_and_vars)
        if not st["reduced"]:
            grads = [g for g, _ in pairs]
            variables = [v for _, v in pairs]
            keep = [i for i, g in enumerate(grads) if g is not None]
            reduced = self._hvd_process([grads[i] for i in keep], [variables[i] for i in keep])
            for i, r in zip(keep, reduced):
                grads[i] = r
            pairs = list(zip(grads, variables))
        st["reduced"] = False
        pairs = [(g, v) for g, v in pairs if g is not None]
        parent = super(self._hvd_dist, self)
        return self._hvd_apply(lambda: parent.apply_gradients(pairs, *args, **kwargs))


def create_distributed_optimizer(optimizer, **settings):
    """A distributed copy of `optimizer` (its class and config); settings as distributed_class
    takes them."""
    return distributed_class(type(optimizer), **settings).from_config(optimizer.get_config())


def distributed_class(base, name=None, device_dense='', device_sparse='', compression=None,
                      sparse_as_dense=False, gradient_predivide_factor=1.0, op=None,
                      backward_passes_per_step=1, average_aggregated_gradients=False,
                      groups=None, process_set=global_process_set, scale_local_gradients=True):
    """The distributed subclass of the optimizer class `base` with these settings."""
    from horovod.tensorflow.compression import Compression
    from horovod.tensorflow.mpi_ops import Average
    if getattr(base, "_hvd", None) is not None:  # already distributed: wrap its base
        base = base._hvd_orig
    mixin = _Keras3Mixin if _is_keras3(base) else _Keras2Mixin
    settings = {
        "name": name if name is not None else f"Distributed{base.__name__}",
        "device_dense": device_dense, "device_sparse": device_sparse,
        "compression": compression if compression is not None else Compression.none,
        "sparse_as_dense": sparse_as_dense,
        "gradient_predivide_factor": gradient_predivide_factor,
        "op": op if op is not None else Average,
        "backward_passes_per_step": backward_passes_per_step,
        "average_aggregated_gradients": average_aggregated_gradients,
        "groups": groups, "process_set": process_set,
        "scale_local_gradients": scale_local_gradients,
    }
    attrs = {k: v for k, v in mixin.__dict__.items() if k not in ("__dict__", "__weakref__")}
    for parent in mixin.__mro__[1:]:
        if parent is object:
            continue
        for k, v in parent.__dict__.items():
            if k not in attrs and k not in ("__dict__", "__weakref__"):
                attrs[k] = v
    attrs["_hvd"] = settings
    # a saved model names the plain optimizer: load_model without hvd still works
    attrs["__module__"] = base.__module__
    attrs["__doc__"] = base.__doc__
    cls = type(base.__name__, (base,), attrs)
    cls._hvd_dist = cls  # (for super(): the mixin's methods are copied into cls)
    cls._hvd_orig = base
    return cls


def local_variables_of(local_layers):
    """The trainable variables of a layer or list of layers."""
    if local_layers is None:
        return []
    if not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    return [v for layer in local_layers for v in layer.trainable_weights]


def load_model(keras, wrap_optimizer, optimizer_modules, filepath, custom_optimizers,
               custom_objects):
    """keras.models.load_model with every optimizer class of `optimizer_modules` (and
    `custom_optimizers`) replaced by its distributed class."""
    objects = {}
    for module in optimizer_modules:
        for attr in dir(module):
            cls = getattr(module, attr)
            if isinstance(cls, type) and issubclass(cls, keras.optimizers.Optimizer) and \
                    cls is not keras.optimizers.Optimizer:
                wrapped = wrap_optimizer(cls)
                objects[cls.__name__] = wrapped
                objects[cls.__name__.lower()] = wrapped
    if custom_optimizers is not None:
        objects.update({cls.__name__: wrap_optimizer(cls) for cls in custom_optimizers})
    if custom_objects is not None:
        objects.update(custom_objects)
    return keras.models.load_model(filepath, custom_objects=objects)
