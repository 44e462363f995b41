"""Elastic training with TensorFlow (Horovod's horovod.tensorflow.elastic): run,
TensorFlowKerasState and TensorFlowState. Use under horovodrun --host-discovery-script (or
--min-np/--max-np)."""
import functools

import tensorflow as tf

from horovod.common.basics import _basics
from horovod.common.elastic import ObjectState, State, run_fn  # noqa: F401
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod.tensorflow.functions import broadcast_object, broadcast_variables
from horovod.tensorflow.mpi_ops import rank


def _from_tf_error(e):
    """A TensorFlow error that an hvd op raised, as the exception elastic recovery expects:
    a lost peer or a shutdown (Unknown) is HorovodInternalError, a host change (Aborted)
    HostsUpdatedInterrupt; None for other errors."""
    text = str(e)
    if "Horovod" not in text:
        return None
    if isinstance(e, tf.errors.AbortedError):
        return HostsUpdatedInterrupt(False)
    if isinstance(e, tf.errors.UnknownError):
        return HorovodInternalError(text)
    return None


def run(func):
    """Decorator for the training function `func(state, *args, **kwargs)`: recovers from lost
    workers and host changes by re-initialising and carrying on from `state`'s last commit."""

    @functools.wraps(func)
    def wrapped(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except (tf.errors.UnknownError, tf.errors.AbortedError) as e:
            converted = _from_tf_error(e)
            if converted is None:
                raise
            raise converted from e

    return run_fn(wrapped, _basics._after_reinit)


def _variables_of(model, optimizer):
    variables = list(model.variables)
    if optimizer is not None:
        opt_vars = optimizer.variables
        variables += list(opt_vars() if callable(opt_vars) else opt_vars)
    return variables


class TensorFlowKerasState(ObjectState):
    """State of a Keras model and its optimizer (their variables, kept in memory at each
    commit) plus any picklable attributes given as keyword arguments (epoch=0, batch=0...)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        self._saved_model_state = None
        self._saved_optimizer_state = None
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _opt_vars(self):
        if self.optimizer is None:
            return []
        v = self.optimizer.variables
        return list(v() if callable(v) else v)

    def save(self):
        self._saved_model_state = [v.numpy() for v in self.model.variables]
        self._saved_optimizer_state = [v.numpy() for v in self._opt_vars()]
        super().save()

    def restore(self):
        if self._saved_model_state is not None:
            for v, value in zip(self.model.variables, self._saved_model_state):
                v.assign(value)
        if self._saved_optimizer_state is not None:
            for v, value in zip(self._opt_vars(), self._saved_optimizer_state):
                v.assign(value)
        super().restore()

    def sync(self):
        variables = _variables_of(self.model, self.optimizer)
        if variables:
            broadcast_variables(variables, root_rank=0)
        self.save()
        super().sync()


class TensorFlowState(ObjectState):
    """State of a list of TensorFlow variables (all global variables of a TensorFlow 1 graph
    when none are given; `session` runs them there) plus picklable keyword attributes."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = variables if variables is not None else \
            tf.compat.v1.global_variables()
        self.session = session
        self._values = None
        super().__init__(bcast_object=functools.partial(broadcast_object, session=session),
                         get_rank=rank, **kwargs)

    def _eval(self, v):
        return self.session.run(v) if self.session is not None else v.numpy()

    def save(self):
        self._values = [self._eval(v) for v in self.variables]
        super().save()

    def restore(self):
        if self._values is not None:
            for v, value in zip(self.variables, self._values):
                if self.session is not None:
                    v.load(value, self.session)
                else:
                    v.assign(value)
        super().restore()

    def sync(self):
        if self.variables:
            op = broadcast_variables(self.variables, root_rank=0)
            if op is not None and self.session is not None:
                self.session.run(op)
        self.save()
        super().sync()


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TensorFlowKerasState", "TensorFlowState", "run"]
