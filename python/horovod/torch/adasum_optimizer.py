"""DistributedOptimizer(op=hvd.Adasum): Horovod's Adasum optimizer.

Adasum combines the ranks' *updates*, not their gradients: when a parameter's gradient is
ready (after backward_passes_per_step passes), the wrapped optimizer steps that parameter
alone, the change it made is Adasum-allreduced (libhvd's op Adasum: per tensor, along the tree
src/collectives/adasum.h describes), and step() sets the parameter to where it started plus
the combined change. The learning rate is therefore not scaled by the number of ranks (Adasum
of equal updates is that update). Everything that is not Adasum's own (naming the parameters,
hooks, backward_passes_per_step, zero_grad's check) is DistributedOptimizer's.
"""
import contextlib

import torch

from horovod.torch.mpi_ops import Adasum, allreduce_async_, synchronize
from horovod.torch._optimizer_base import _DistributedOptimizer


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Mixed, over _DistributedOptimizer's methods, into a subclass of the wrapped optimizer's
    class (see make)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 process_set):
        _DistributedOptimizer.__init__(self, params, named_parameters, compression,
                                       backward_passes_per_step, op=Adasum,
                                       process_set=process_set)
        # where each parameter stood before its own step (the change is reduced in place)
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for p in self._parameter_names}

    def _step_one(self, p):
        """The wrapped optimizer's step on p alone."""
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is q for q in group["params"]) else []
        try:
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            p.grad = p.data.new(p.size()).zero_()  # (every rank must submit the name)
        start = self._starting_models[p]
        start.copy_(p.data)
        self._step_one(p)
        p.data.sub_(start)  # p holds its change now
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=Adasum,
                                  process_set=self.process_set)
        return handle, (ctx, compressed)

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._handles and self._handles[p][0] is not None:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
            self._allreduce_delay[p] -= 1
            handle, ctx = None, None
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Start the parameters whose hook did not (or not yet) run, wait for every change's
        Adasum, and move each parameter to its start plus the combined change."""
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, (cctx, compressed)) in self._handles.items():
            change = self._compression.decompress(synchronize(handle), cctx)
            start = self._starting_models[p]
            start.add_(change.reshape(p.shape).to(start.dtype))
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        if not self._requires_update:  # no hooks (one rank): Adasum of one update is itself
            return super(self.__class__, self).step(closure)
        loss = closure() if closure is not None else None
        if self.process_set.included():
            self.synchronize()
        self._synchronized = False
        return loss


def make(optimizer, named_parameters, compression, backward_passes_per_step, process_set):
    """The Adasum DistributedOptimizer over optimizer (DistributedOptimizer(op=Adasum))."""
    methods = dict(_DistributedOptimizer.__dict__)
    methods.update({k: v for k, v in _DistributedAdasumOptimizer.__dict__.items()
                    if not k.startswith("__") or k == "__init__"})
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               process_set)
