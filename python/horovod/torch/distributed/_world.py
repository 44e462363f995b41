"""The world and its store: under horovodrun the job's (a store without a port of its own), under
torchrun or any env:// launcher formed through the c10d store torch hands the backend; the
groups torch creates on it (hvd process sets for new_group).
"""
import datetime
import os
import socket
import sys
import threading
from urllib.parse import urlparse

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from horovod import _hvd
from horovod.common.basics import _basics
from horovod.torch import mpi_ops as _ops
from horovod.torch import store_attempt

from horovod.torch.distributed._common import BACKEND, _ProcessGroup, _rdv
from horovod.torch.distributed._process_group import ProcessGroupHvd


# (the env:// handler torch had, which ours falls back on)
_orig_env_handler = _rdv._rendezvous_handlers["env"]


# ---- the store of a horovodrun job ----------------------------------------------------------

class _JobStore(dist.Store):
    """The store torch is given under horovodrun without MASTER_ADDR: no port of its own (the
    job's world is hvd's, formed through horovodrun's authenticated rendezvous). torch uses
    its default store for one thing here, the barrier that ends init_process_group and
    new_group, which every rank of the job runs alike: add() is therefore a collective (a sum
    over the job, kept per key), and a key set on one rank is seen by that rank only."""

    def __init__(self):
        super().__init__()
        self._values = {}
        self._adds = 0

    def add(self, key, amount):
        self._adds += 1
        t = torch.tensor([int(amount)], dtype=torch.int64)
        _ops.allreduce_(t, op=_ops.Sum, name=f"dist.store.{self._adds}")
        value = int(self._values.get(key, 0)) + int(t.item())
        self._values[key] = value
        return value

    def set(self, key, value):
        self._values[key] = bytes(value) if not isinstance(value, str) else value.encode()

    def get(self, key):
        if key not in self._values:
            raise RuntimeError(f"hvd backend: the store of a horovodrun job serves torch's own "
                               f"barriers; it has no {key!r} on this rank (start the job with "
                               "MASTER_ADDR and MASTER_PORT set to use torch's TCPStore)")
        v = self._values[key]
        return v if isinstance(v, bytes) else str(v).encode()

    def check(self, keys):
        return all(k in self._values for k in keys)

    def wait(self, keys, timeout=None):
        for k in keys:
            self.get(k)  # (a key this rank has not set never comes: say so at once)

    def num_keys(self):
        return len(self._values)

    def delete_key(self, key):
        return self._values.pop(key, None) is not None


# The Python side of the store, alive for the life of the process: torch's C++ (a PrefixStore
# of it that a program kept) may call it after the world is gone.
_job_store = {}


def _under_horovodrun():
    return bool(os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or
                os.environ.get("HOROVOD_RANK"))


def _for_hvd():
    """Whether the init_process_group running this rendezvous is for the "hvd" backend (a
    gloo job under horovodrun keeps torch's own env:// and its errors)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "init_process_group":
        frame = frame.f_back
    return frame is not None and str(frame.f_locals.get("backend", "")).lower() == BACKEND


def _env_handler(url, timeout=_c10d.default_pg_timeout, **kwargs):
    """torch's env:// rendezvous, except in a horovodrun job without MASTER_ADDR: there the
    world is hvd's, initialised here, with _JobStore as torch's store."""
    if os.environ.get("MASTER_ADDR") or not _under_horovodrun() or not _for_hvd():
        yield from _orig_env_handler(url, timeout=timeout, **kwargs)
        return
    query = dict(q.split("=", 1) for q in urlparse(url).query.split("&") if "=" in q)
    if not _hvd.is_initialized():
        _basics.init()
        _owned["init"] = True
    _owned["fresh"] = True
    rank, size = _hvd.rank(), _hvd.size()
    _agree(int(query.get("rank", rank)), int(query.get("world_size", size)))
    store = _job_store.setdefault("store", _JobStore())
    yield (store, rank, size)
    raise RuntimeError("hvd backend: a horovodrun job cannot re-rendezvous")


# ---- creating groups --------------------------------------------------------------------

_state = threading.local()
_owned = {"init": False}   # this module initialised hvd (and shuts it down with the world)
_psets = {}                # sorted global ranks -> hvd process set id


def _store_callbacks(store):
    def set_(key, value):
        store.set(key, value)

    def get(key, timeout_ms):
        try:
            store.wait([key], datetime.timedelta(milliseconds=max(timeout_ms, 1)))
        except RuntimeError as e:
            # torch 1.13's stores have no check(): a wait that ran out says so ("Socket
            # Timeout", "Wait timeout"); anything else (the store gone) stays an I/O error
            if "timeout" in str(e).lower():
                raise TimeoutError(str(e)) from None
            raise
        return bytes(store.get(key))
    return set_, get


def _route_addr():
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        return None
    try:
        return socket.gethostbyname(addr)
    except OSError:
        return None


def _init_world(store, rank, size, timeout):
    """hvd's world for torch's default group."""
    if _owned.pop("fresh", False):  # initialised by _env_handler for this very group
        _agree(rank, size)
        return
    if _hvd.is_initialized():
        if _owned["init"]:  # ours, from an init_process_group never destroyed: start again
            _shutdown_world()
        else:  # the program's hvd.init() (horovodrun): the world is hvd's
            _agree(rank, size)
            return
    if _under_horovodrun():
        _basics.init()
        _agree(rank, size)
    else:
        seconds = max(1, int(timeout.total_seconds())) if timeout else 0
        if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun: one store for every attempt
            # (torch always gives a timeout; without one, libhvd's default rendezvous wait)
            token = store_attempt.agree(store, rank, size, seconds or 30)
            store = dist.PrefixStore(f"hvd.{token}", store)
        set_, get = _store_callbacks(store)
        _hvd.init_store(rank, size, _route_addr(), set_, get, seconds)
    _owned["init"] = True


def _agree(rank, size):
    if _hvd.rank() != rank or _hvd.size() != size:
        raise RuntimeError(f"hvd backend: torch.distributed says rank {rank} of {size} but the "
                           f"hvd job says rank {_hvd.rank()} of {_hvd.size()}: under horovodrun "
                           "pass no rank or world_size (or the job's)")


def _shutdown_world():
    _psets.clear()
    _basics.shutdown()
    _owned["init"] = False


def _create(opts, pg_options=None):
    # (TORCH_DISTRIBUTED_DEBUG=DETAIL's checks, torch's ProcessGroupWrapper, wrap only C++
    # backends; hvd checks every collective's operation, dtype, shape, op and root across the
    # ranks itself, at every level: ProcessGroupHvd._keys)
    return _named(_create_group(opts), opts)


def _create_group(opts):
    ranks = list(opts.global_ranks_in_group)
    rank, size = opts.group_rank, opts.group_size
    if not ranks:
        _init_world(opts.store, rank, size, opts.timeout)
        return ProcessGroupHvd(rank, size, 0, range(size), opts.group_id, opts.timeout)
    if len(ranks) == _hvd.size():
        return ProcessGroupHvd(rank, size, 0, ranks, opts.group_id, opts.timeout)
    pset = getattr(_state, "pset", None)
    if pset is None:
        raise RuntimeError("hvd backend: a group of some ranks needs every rank of the job to "
                           "call new_group (torch's rule) through this torch's new_group; this "
                           "group was created some other way")
    return ProcessGroupHvd(rank, size, pset, ranks, opts.group_id, opts.timeout)


_Fake = getattr(torch._C._distributed_c10d, "FakeProcessGroup", None)


def _named(pg, opts):
    """torch 2 keeps a group's name in its C++ backends (ProcessGroup.group_name raises "name
    not set" without one), and functional collectives (DTensor, fully_shard) find a group by
    that name: a Python process group gets a placeholder backend for the CPU to carry it.
    Every operation still reaches this group's Python methods (torch calls the group's, which
    are ours, and the functional collectives call the group's virtual methods)."""
    if _Fake is None or not hasattr(pg, "_register_backend"):
        return pg  # (torch 1.13: no backends, no functional collectives)
    create = getattr(_Fake, "_create_internal", None) or _Fake
    holder = create(opts.group_rank, opts.group_size)
    pg._register_backend(torch.device("cpu"), _ProcessGroup.BackendType.CUSTOM, holder)
    pg._set_default_backend(_ProcessGroup.BackendType.CUSTOM)
    return pg


def _register_pset(ranks):
    key = tuple(sorted(ranks))
    if key not in _psets:
        _psets[key] = _hvd.add_process_set(list(key))
    return _psets[key]
