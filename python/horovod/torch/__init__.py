"""Horovod's PyTorch API on hvd: `import horovod.torch as hvd`.

    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

CPU tensors only (this build has no CUDA). Everything of horovod.torch 0.28.1 is here under the
same names, Adasum included (on any number of ranks, where Horovod needs MPI and a power of
two).
"""
from horovod.common.basics import _basics
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                         remove_process_set)
from horovod.torch import distributed as _distributed  # noqa: F401  (the "hvd" torch backend)
from horovod.torch import elastic  # noqa: F401  (hvd.elastic.run, hvd.elastic.TorchState)
from horovod.torch import mpi_ops as _mpi_ops
from horovod.torch.compression import Compression
from horovod.torch.functions import (allgather_object, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)
from horovod.torch.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather,
                                   allgather_async, allreduce, allreduce_, allreduce_async,
                                   allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                                   broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                                   grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                                   grouped_allreduce_async, grouped_allreduce_async_,
                                   grouped_reducescatter, grouped_reducescatter_async, join, poll,
                                   reducescatter, reducescatter_async, sparse_allreduce_async,
                                   synchronize)
from horovod.torch.optimizer import DistributedOptimizer
from horovod.torch.sync_batch_norm import SyncBatchNorm

from horovod.torch.mpi_ops import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                   gloo_built, gloo_enabled, init, is_homogeneous,
                                   is_initialized, local_rank, local_size, mpi_built,
                                   mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                   report_stragglers, rocm_built, shutdown, size,
                                   start_timeline, stop_timeline)

# pending handles die with the job they belonged to
_basics._shutdown_hooks.append(_mpi_ops._reset_handles)
