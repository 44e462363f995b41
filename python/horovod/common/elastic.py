"""Elastic training state and the run wrapper, framework-independent (Horovod's
horovod.common.elastic). The recovery loop itself is libhvd's hvd_elastic_run: it leaves a
failed world, joins the elastic driver's next round (retrying while that round forms) and
decides, with the driver, whether the state must be synced; this module supplies the State
whose save/restore/sync/on_reset it calls."""
import functools

from horovod import _hvd
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401


class State:
    """Training state kept consistent across the workers of an elastic job.

    Subclasses implement save (commit to memory), restore (back to the last commit) and sync
    (make every rank's state rank 0's). `bcast_object` broadcasts a picklable object from rank
    0; `get_rank` returns this worker's rank."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions to call, in order, after every re-initialisation (a worker was added or
        removed), before the state is synced: e.g. to rescale the learning rate."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Save the state (the point a failure rolls back to), then check for host changes:
        raises HostsUpdatedInterrupt on every rank alike when the driver announced one. A
        commit copies the whole state, so commit every few batches rather than every one."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt on every rank when the elastic driver announced a host
        change (rank 0's view, shared in one small collective). Outside elastic mode: nothing
        happens."""
        _hvd.elastic_check_host_updates()

    def save(self):
        """Save the state in memory."""
        raise NotImplementedError()

    def restore(self):
        """Go back to the last saved state, dropping what changed since."""
        raise NotImplementedError()

    def sync(self):
        """Make every rank's state rank 0's."""
        raise NotImplementedError()

    def reset(self):
        """Called after a re-initialisation, before sync (and before the reset callbacks)."""


class ObjectState(State):
    """State made of plain picklable objects, given as keyword arguments and exposed as
    attributes; sync broadcasts them from rank 0."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, reset):
    """Wrap `func(state, *args, **kwargs)` for elastic training. `reset()` is the framework
    package's own bookkeeping after libhvd re-initialised (forget the old world's handles and
    process sets); the State's on_reset follows it.

    The wrapper syncs the state, then calls func. HorovodInternalError (a peer was lost):
    restore the last commit, re-initialise in the driver's next round, sync, call func again.
    HostsUpdatedInterrupt: keep the state (it was just committed), re-initialise, sync when
    the driver says so, call again. Other exceptions propagate. A worker the driver removes,
    or every worker of a job it stops, exits with status 0 after saying why. Outside elastic
    mode func runs once and its errors propagate."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        return _hvd.elastic_run(state, functools.partial(func, state, *args, **kwargs), reset)

    return wrapper
