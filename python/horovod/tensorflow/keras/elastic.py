"""Elastic Keras training on tf.keras: KerasState and the callbacks that keep it current."""
import tensorflow as tf

from horovod._keras import elastic as _impl
from horovod.tensorflow.elastic import TensorFlowKerasState, run

keras = tf.keras


class KerasState(TensorFlowKerasState):
    """State of a Keras model and its optimizer, plus picklable attributes (epoch, batch...)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(_impl.CommitStateCallbackImpl, keras.callbacks.Callback):
    """Commit the state every batches_per_commit batches and at each epoch's end."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__(tf.keras.backend, state, batches_per_commit)


class UpdateBatchStateCallback(_impl.UpdateBatchStateCallbackImpl, keras.callbacks.Callback):
    """Keep state.batch current (a reset resumes the epoch where it stopped)."""

    def __init__(self, state):
        super().__init__(tf.keras.backend, state)


class UpdateEpochStateCallback(_impl.UpdateEpochStateCallbackImpl, keras.callbacks.Callback):
    """Keep state.epoch current (fit(initial_epoch=state.epoch) resumes from it)."""

    def __init__(self, state):
        super().__init__(tf.keras.backend, state)


__all__ = ['KerasState', 'CommitStateCallback', 'UpdateBatchStateCallback',
           'UpdateEpochStateCallback', 'run']
