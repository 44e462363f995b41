"""Registration: the backend "hvd" with torch.distributed, and the c10d functions it wraps
(new_group's helper, destroy_process_group, monitored_barrier, the env:// handler).
"""
import atexit
import inspect

import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from horovod import _hvd

from horovod.torch.distributed._common import BACKEND, _rdv
from horovod.torch.distributed._work import _completer
from horovod.torch.distributed._process_group import ProcessGroupHvd
from horovod.torch.distributed._world import (_create, _env_handler, _owned, _register_pset,
                                              _shutdown_world, _state)


# torch creates a subgroup's backend on its members only, but an hvd process set is
# registered by every rank of the job: torch's helper, which every rank calls for new_group,
# registers it first.
_orig_helper = _c10d._new_process_group_helper


def _helper(group_size, group_rank, global_ranks_in_group, backend, store, *args, **kwargs):
    ranks = list(global_ranks_in_group or [])
    ours = str(backend).lower() == BACKEND
    if ours and ranks and _hvd.is_initialized() and len(ranks) < _hvd.size():
        _state.pset = _register_pset(ranks)
    try:
        return _orig_helper(group_size, group_rank, global_ranks_in_group, backend, store, *args,
                            **kwargs)
    finally:
        _state.pset = None


_orig_monitored_barrier = _c10d.monitored_barrier


def _monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, which torch implements for gloo only: on a group
    of this backend, ProcessGroupHvd.monitored_barrier."""
    pg = _c10d._get_default_group() if group is None or group is _c10d.GroupMember.WORLD \
        else group
    if isinstance(pg, ProcessGroupHvd):
        return pg.monitored_barrier(timeout, wait_all_ranks)
    return _orig_monitored_barrier(group=group, timeout=timeout, wait_all_ranks=wait_all_ranks)


_orig_destroy = _c10d.destroy_process_group


def _destroy(group=None):
    world = group is None or group is _c10d.GroupMember.WORLD
    was_ours = world and _c10d.is_initialized() and \
        _c10d.get_backend(_c10d._get_default_group()) == BACKEND
    _orig_destroy(group)
    if was_ours and _owned["init"]:
        _shutdown_world()


# Operations a finished script left in flight get this long to complete at exit.
_EXIT_DRAIN_SECONDS = 10


def _at_exit():
    _completer.quiesce(_EXIT_DRAIN_SECONDS)
    if _owned["init"] and _hvd.is_initialized():
        _shutdown_world()
        _completer.quiesce(_EXIT_DRAIN_SECONDS)  # what the shutdown failed completes now


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        # (torch 2: a backend that names no devices is taken for cpu, cuda and xpu, with a
        # warning at every import)
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    else:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)
    _rdv._rendezvous_handlers["env"] = _env_handler
    _c10d._new_process_group_helper = _helper
    _c10d.destroy_process_group = _destroy
    dist.destroy_process_group = _destroy
    _c10d.monitored_barrier = _monitored_barrier
    dist.monitored_barrier = _monitored_barrier
    atexit.register(_at_exit)


_register()
