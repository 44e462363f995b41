"""The Keras callbacks of horovod.tensorflow.keras and horovod.keras, written once: each
package mixes these into its own Keras's Callback class."""
import warnings

import numpy as np
import tensorflow as tf

from horovod.tensorflow.functions import broadcast_variables
from horovod.tensorflow.mpi_ops import Average, _allreduce, size
from horovod.tensorflow.util import _var_key


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    v = optimizer.variables
    return list(v() if callable(v) else v)


def get_lr(optimizer):
    lr = getattr(optimizer, "learning_rate", None)
    if lr is None:
        lr = optimizer.lr
    if callable(lr) and not hasattr(lr, "numpy"):
        # a LearningRateSchedule: its value at this step
        lr = lr(optimizer.iterations)
    return float(lr.numpy() if hasattr(lr, "numpy") else lr)


def set_lr(optimizer, value):
    lr = getattr(optimizer, "learning_rate", None)
    if hasattr(lr, "assign"):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


def _momentum_variable(optimizer):
    """The optimizer's momentum when it can be changed between steps (tf-keras keeps it as a
    hyperparameter variable; Keras 3 bakes a float into the traced step, so no correction
    can be applied there)."""
    hyper = getattr(optimizer, "_hyper", None)
    if isinstance(hyper, dict) and "momentum" in hyper:
        return optimizer._get_hyper("momentum")
    m = getattr(optimizer, "momentum", None)
    return m if hasattr(m, "assign") else None


class BroadcastGlobalVariablesCallbackImpl:
    """Give every rank root_rank's model (and, after the first batch, optimizer) variables,
    except the local ones."""

    def __init__(self, backend, root_rank, device='', local_variables=None, *args):
        super().__init__(*args)
        self.backend = backend
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self.local_variables = {_var_key(v) for v in (local_variables or [])}

    def register_local_var(self, var):
        self.local_variables.add(_var_key(var))

    def _broadcast(self, variables):
        variables = [v for v in variables if _var_key(v) not in self.local_variables]
        if variables:
            broadcast_variables(variables, root_rank=self.root_rank)

    def on_train_begin(self, logs=None):
        self._broadcast(self.model.variables)

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        # the optimizer's slots exist once a step has run
        self._broadcast(list(self.model.variables) +
                        _optimizer_variables(getattr(self.model, "optimizer", None)))
        self.broadcast_done = True


class MetricAverageCallbackImpl:
    """At each epoch's end, every metric in the logs averaged over the ranks (one allreduce
    of all of them, in name order)."""

    def __init__(self, backend, device='', *args):
        super().__init__(*args)
        self.backend = backend
        self.device = device

    def _average_metrics_in_place(self, logs):
        if not logs or size() == 1:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and
                       isinstance(np.asarray(v).item(), (int, float)))
        if not names:
            return
        values = tf.constant([float(logs[k]) for k in names], dtype=tf.float64)
        averaged = _allreduce(values, name="MetricAverageCallback", op=Average).numpy()
        for k, v in zip(names, averaged):
            logs[k] = float(v)

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


class LearningRateScheduleCallbackImpl:
    """learning rate = initial_lr * multiplier(epoch) from start_epoch until end_epoch (per
    epoch with staircase, else per batch with a fractional epoch); momentum_correction scales
    the momentum by the change for the batch where it happens."""

    def __init__(self, backend, initial_lr, multiplier, start_epoch=0, end_epoch=None,
                 staircase=True, momentum_correction=True, steps_per_epoch=None, *args):
        super().__init__(*args)
        self.backend = backend
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.initial_lr = initial_lr
        self.restore_momentum = None
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if not callable(multiplier):
            self.staircase = True
            self.multiplier = lambda epoch: multiplier
        else:
            self.multiplier = multiplier
        if self.initial_lr is None:
            warnings.warn("Parameter `initial_lr` will be required in v0.21.0", DeprecationWarning)

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        if self.params.get("samples") and self.params.get("batch_size"):
            return self.params["samples"] // self.params["batch_size"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify "
                         "the steps_per_epoch parameter to the %s() or upgrade to the latest "
                         "version of Keras." % self.__class__.__name__)

    def _adjust_learning_rate(self, epoch):
        opt = self.model.optimizer
        old_lr = get_lr(opt)
        new_lr = self.initial_lr * self.multiplier(epoch)
        set_lr(opt, new_lr)
        momentum = _momentum_variable(opt)
        if momentum is not None and self.momentum_correction and old_lr > 0:
            self.restore_momentum = float(momentum.numpy())
            momentum.assign(self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            _momentum_variable(self.model.optimizer).assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = get_lr(self.model.optimizer)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or \
                (self.end_epoch is not None and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = get_lr(self.model.optimizer)


class LearningRateWarmupCallbackImpl(LearningRateScheduleCallbackImpl):
    """The learning rate grows from initial_lr / size to initial_lr over warmup_epochs
    (Goyal et al., "Accurate, Large Minibatch SGD")."""

    def __init__(self, backend, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0, *args):
        def multiplier(epoch):
            # epoch may be fractional (per batch)
            return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)

        super().__init__(backend, initial_lr, multiplier, start_epoch=0,
                         end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, *args)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g." %
                  (epoch + 1, get_lr(self.model.optimizer)))
