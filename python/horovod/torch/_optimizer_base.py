"""The methods every DistributedOptimizer mixes into a subclass of the wrapped optimizer's
class: a hook on each parameter's gradient accumulator starts that parameter's allreduce as
soon as its gradient is ready, so communication overlaps the rest of the backward pass and
libhvd fuses the allreduces that are ready together; step() (or synchronize()) waits for them
all and writes the averages into the .grad fields before the wrapped optimizer's own step.
Its own module so that both optimizer.py (the factory) and adasum_optimizer.py (Adasum's
methods over these) import it, and neither imports the other back.
"""
import contextlib
import os
import warnings

import torch

from horovod.common.process_sets import global_process_set
from horovod.common.util import split_list
from horovod.common.basics import _basics
from horovod.torch.mpi_ops import (Average, allreduce_async_, grouped_allreduce_async_,
                                   sparse_allreduce_async, synchronize)


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into a subclass of the wrapped optimizer's class (see DistributedOptimizer)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._parameter_names = self._names(named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        if groups is not None:
            self._form_groups(groups)
        if self.process_set.included() and (_basics.size() > 1 or
                                            os.environ.get("HOROVOD_ELASTIC") == "1"):
            self._register_hooks()

    def _names(self, named_parameters):
        """parameter -> name; every parameter of the optimizer must be named, once."""
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            return {p: f"allreduce.noname.{i}.{j}"
                    for i, group in enumerate(self.param_groups)
                    for j, p in enumerate(group["params"])}
        named_parameters = list(named_parameters)
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        seen, dups = set(), []
        for name, _ in named_parameters:
            if name in seen and name not in dups:
                dups.append(name)
            seen.add(name)
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found "
                             "duplicates: " + ", ".join(dups))
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [id(p) for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named. Python object ids: " +
                             ", ".join(str(i) for i in unnamed))
        return {p: f"allreduce.{name}" for name, p in sorted(named_parameters,
                                                             key=lambda kv: kv[0])}

    def _form_groups(self, groups):
        """Parameters allreduced together: `groups` of them (in an order every rank shares), or
        the given lists."""
        if isinstance(groups, int):
            from horovod.torch.functions import broadcast_object
            params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
            # rank 0's order, so that every rank forms the same groups
            order = broadcast_object([self._parameter_names[p] for p in params], root_rank=0,
                                     process_set=self.process_set)
            rank_of = {n: i for i, n in enumerate(order)}
            params.sort(key=lambda p: rank_of[self._parameter_names[p]])
            formed = [tuple(g) for g in split_list(params, groups) if g]
        else:
            formed = [tuple(p for p in g if p.requires_grad) for g in groups]
            formed = [g for g in formed if g]
        for g in formed:
            for p in g:
                self._p_to_group[p] = g
            self._group_counts[g] = 0

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    # the accumulator node of p: its hook runs once p.grad holds this pass
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)

    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Another rank may have computed this gradient (a dynamic forward): every rank
            # must still submit the name.
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(grad, name=name, op=self.op,
                                              process_set=self.process_set), None
            # reduced as a dense copy; _finish makes the result sparse again, so that
            # optimizers that take only sparse gradients (SparseAdam) still work
            grad = grad.to_dense()
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, (ctx, compressed)

    def _grouped_allreduce_grad_async(self, group):
        tensors, ctxs = [], []
        for p in group:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
            compressed, ctx = self._compression.compress(p.grad)
            tensors.append(compressed)
            ctxs.append((ctx, compressed))
        pre, post = self._scale_factors()
        name = self._parameter_names.get(group[0]) + f".group{len(group)}"
        handle = grouped_allreduce_async_(tensors, name=name, op=self.op, prescale_factor=pre,
                                          postscale_factor=post, process_set=self.process_set)
        return handle, ctxs

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None and p in self._p_to_group:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for q in group:
                            self._handles.pop(q, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _finish(self, p, output, ctx):
        cctx, compressed = ctx if ctx is not None else (None, None)
        self._allreduce_delay[p] = self.backward_passes_per_step
        if output.is_sparse:
            p.grad = output
            return
        result = self._compression.decompress(output, cctx)
        if p.grad.is_sparse:  # sparse_as_dense
            p.grad = result.reshape(p.grad.shape).to_sparse()
            return
        if result is not p.grad:
            p.grad.copy_(result.reshape(p.grad.shape))

    def synchronize(self):
        """Wait for every gradient's allreduce (starting those whose hook did not run) and
        write the results into the .grad fields."""
        if not self.process_set.included():
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for p in self._requires_update - done:
            if self._groups is not None and p in self._p_to_group:
                group = self._p_to_group[p]
                if group not in self._handles:
                    self._handles[group] = self._grouped_allreduce_grad_async(group)
                    self._group_counts[group] = 0
            else:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)
        for key, (handle, ctx) in self._handles.items():
            outputs = synchronize(handle)
            if isinstance(key, tuple):
                for q, out, c in zip(key, outputs, ctx):
                    self._finish(q, out, c)
            else:
                self._finish(key, outputs, ctx)
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize (for code that called synchronize() itself,
        e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)
