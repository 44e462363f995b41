"""Process sets: subsets of the job's ranks that run collectives among themselves.

A set is known by its sorted global ranks; registering it (at hvd.init(process_sets=...), or
later with add_process_set when dynamic process sets are enabled) gives it an id that every
collective's `process_set=` argument carries to libhvd. Registration is collective: every
rank of the job registers the same sets in the same order.
"""
from horovod import _hvd
from horovod.common import util


class ProcessSet:
    """A subset of ranks. `ProcessSet([0, 2])`; hvd.global_process_set is every rank."""

    def __init__(self, ranks_or_comm):
        if hasattr(ranks_or_comm, "Get_group"):
            raise ValueError("hvd has no MPI: give a process set as a list of ranks")
        self.ranks = sorted(int(r) for r in ranks_or_comm)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"a process set lists a rank twice: {list(ranks_or_comm)}")
        self.process_set_id = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks in the set (None before registration)."""
        if self.process_set_id is None:
            return None
        return _hvd.process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set (None before registration; -1 when not in it)."""
        if self.process_set_id is None:
            return None
        return _hvd.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process belongs to the set (None before registration)."""
        if self.process_set_id is None:
            return None
        return bool(_hvd.process_set_included(self.process_set_id))

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks and \
            self.process_set_id == other.process_set_id

    def __hash__(self):
        return hash((tuple(self.ranks), self.process_set_id))


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# id -> ProcessSet registered through this module
_registered = {0: global_process_set}


# Whether add/remove_process_set are allowed: decided at init, as Horovod's core reads
# HOROVOD_DYNAMIC_PROCESS_SETS once (hvd.init(process_sets="dynamic") sets it).
_dynamic = False


def _dynamic_enabled():
    return _dynamic


def _setup(process_sets, dynamic):
    """After init: the global set's ranks, then the static sets, registered in order."""
    global _dynamic
    _dynamic = bool(dynamic)
    global_process_set.ranks = list(range(_hvd.size()))
    _registered.clear()
    _registered[0] = global_process_set
    for ps in process_sets or []:
        if not isinstance(ps, ProcessSet):
            raise ValueError("process_sets must be a list of hvd.ProcessSet")
        _register(ps)


def _register(ps):
    if ps.ranks == global_process_set.ranks or not ps.ranks:
        raise ValueError(f"{ps} is the global process set, which exists already")
    for r in ps.ranks:
        if r < 0 or r >= _hvd.size():
            raise ValueError(f"{ps} lists rank {r}, but the job has {_hvd.size()} ranks")
    ps.process_set_id = _hvd.add_process_set(ps.ranks)
    _registered[ps.process_set_id] = ps


def _teardown():
    for ps in _registered.values():
        if ps is not global_process_set:
            ps._invalidate()
    _registered.clear()
    _registered[0] = global_process_set


def add_process_set(process_set):
    """Register a process set (a ProcessSet or a list of ranks) after hvd.init(); needs
    HOROVOD_DYNAMIC_PROCESS_SETS=1 (or hvd.init(process_sets="dynamic")). Every rank calls it
    alike. Returns the registered ProcessSet."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"Attempted to add process set {process_set} that has been registered "
                         "before")
    if not _dynamic_enabled():
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to add process sets after "
                         "hvd.init() (or call hvd.init(process_sets='dynamic'))")
    for ps in _registered.values():
        if ps.ranks == process_set.ranks:
            raise ValueError(f"A process set with the ranks {process_set.ranks} exists already: "
                             f"{ps}")
    _register(process_set)
    return process_set


def remove_process_set(process_set):
    """Unregister a process set added before (collective). Returns True when it was removed,
    False for one that was not registered and for the global set, which is never removed."""
    if process_set.process_set_id in (None, 0):
        return False  # not registered, or the global set (Horovod's answers)
    if not _dynamic_enabled():
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to remove process sets")
    _hvd.remove_process_set(process_set.process_set_id)
    _registered.pop(process_set.process_set_id, None)
    process_set._invalidate()
    return True
