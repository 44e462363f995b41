"""DistributedOptimizer: averages gradients across ranks while the backward pass runs.

A hook on each parameter's gradient accumulator starts that parameter's allreduce as soon as
its gradient is ready, so communication overlaps the rest of the backward pass and libhvd
fuses the allreduces that are ready together. step() (or synchronize()) waits for them all
and writes the averages into the .grad fields before the wrapped optimizer's own step.
"""
import warnings

import torch

from horovod.common.process_sets import global_process_set
from horovod.torch import adasum_optimizer
from horovod.torch._optimizer_base import _DistributedOptimizer
from horovod.torch.compression import Compression
from horovod.torch.mpi_ops import Adasum, Average


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wrap a torch optimizer so that step() uses gradients averaged over every rank.

    named_parameters: model.named_parameters(), to name the allreduces (recommended);
    compression: Compression.none or Compression.fp16 for the wire; backward_passes_per_step:
    backward passes accumulated locally before the allreduce; op: Average, Sum or Adasum
    (adasum_optimizer.py: the ranks' updates combined by Adasum);
    gradient_predivide_factor: divide before the sum and multiply after (Average only);
    groups: an int (that many groups of parameters allreduced together) or lists of
    parameters; num_groups: the deprecated name of an int groups; sparse_as_dense: reduce
    sparse gradients as dense tensors; process_set: the ranks that average together.
    Returns an instance of a subclass of the optimizer's own class."""
    if op != Average and gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum:
        return adasum_optimizer.make(optimizer, named_parameters, compression,
                                     backward_passes_per_step, process_set)
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "torch.Tensor.")
        if isinstance(groups, list):
            seen = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
