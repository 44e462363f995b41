"""Horovod's Keras callbacks for tf.keras."""
import tensorflow as tf

from horovod._keras import callbacks as _impl

keras = tf.keras


class BroadcastGlobalVariablesCallback(_impl.BroadcastGlobalVariablesCallbackImpl,
                                       keras.callbacks.Callback):
    """Broadcast root_rank's model (and optimizer) variables to every rank when training
    starts, so that every rank starts from the same state (from random weights, or from a
    checkpoint that only root_rank loaded). `local_variables` are left as they are."""

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__(tf.keras.backend, root_rank, device, local_variables)


class MetricAverageCallback(_impl.MetricAverageCallbackImpl, keras.callbacks.Callback):
    """Average the epoch's metrics over the ranks (put it before callbacks that read them,
    such as ReduceLROnPlateau or ModelCheckpoint)."""

    def __init__(self, device=''):
        super().__init__(tf.keras.backend, device)


class LearningRateScheduleCallback(_impl.LearningRateScheduleCallbackImpl,
                                   keras.callbacks.Callback):
    """Set the learning rate to initial_lr * multiplier (a number, or a function of the
    epoch) from start_epoch until end_epoch."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__(tf.keras.backend, initial_lr, multiplier, start_epoch, end_epoch,
                         staircase, momentum_correction, steps_per_epoch)


class LearningRateWarmupCallback(_impl.LearningRateWarmupCallbackImpl, keras.callbacks.Callback):
    """Ramp the learning rate from initial_lr / size to initial_lr over warmup_epochs."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__(tf.keras.backend, initial_lr, warmup_epochs, momentum_correction,
                         steps_per_epoch, verbose)


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """ModelCheckpoint that keeps the best model only (its filepath is set by whoever runs
    the training, as Horovod's Spark estimators do)."""

    def __init__(self, monitor='val_loss', verbose=0, save_weights_only=False, mode='auto',
                 save_freq='epoch'):
        super().__init__(filepath="best_model.keras" if not save_weights_only
                         else "best_model.weights.h5",
                         monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
