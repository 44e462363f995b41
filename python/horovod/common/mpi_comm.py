"""hvd.init(comm=...): the world of an MPI communicator, as Horovod's MPI build has it.

comm is an mpi4py communicator (its ranks are the world, in its rank order) or a list of
global ranks (the group of MPI_COMM_WORLD made of them, created by its members only, as
Horovod does). libhvd forms that world through hvd_init_store over a store that the
communicator carries: every rank writes its check-in record into it, and the first record a
rank lacks makes every rank gather what all have written (one allgather on the communicator;
each rank writes everything before it reads anything, so each gathers exactly once). The job
secret travels the same way, i.e. as protected as the MPI job's own traffic; HVD_SECRET_FILE
keeps it off the wire.

Without an MPI launcher (plain horovodrun), a list of every rank of the job is that job, and
a strict subset is refused with what to do instead.
"""
import os
import pickle
import time

from horovod import _hvd

# What an MPI launcher sets in its ranks' environment (Open MPI, MPICH and PMIx launchers).
_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def _under_mpi():
    return any(v in os.environ for v in _MPI_ENV)


def _job_size():
    return int(os.environ.get("HOROVOD_SIZE", "1"))


def _check_ranks(ranks):
    if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise ValueError(f"hvd.init(comm=...): the list holds global ranks (ints), not {ranks!r}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"hvd.init(comm=...): rank listed twice in {ranks!r}")


def _communicator(comm):
    """The mpi4py communicator of comm, or None when comm stands for the whole horovodrun
    job (a list of all its ranks, no MPI)."""
    if isinstance(comm, (list, tuple)):
        ranks = list(comm)
        _check_ranks(ranks)
        if not _under_mpi():
            if sorted(ranks) == list(range(_job_size())):
                return None
            raise ValueError(
                f"hvd.init(comm={ranks!r}): a subset of the job's ranks needs MPI (run under "
                "mpirun or horovodrun --mpi, with mpi4py installed); under horovodrun alone, "
                "every rank initialises the whole job, and process sets (hvd.ProcessSet) run "
                "collectives among subsets")
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        if world.rank not in ranks:
            raise ValueError(f"hvd.init(comm={ranks!r}): this process (rank {world.rank} of "
                             "MPI_COMM_WORLD) is not in the list")
        bad = [r for r in ranks if not 0 <= r < world.size]
        if bad:
            raise ValueError(f"hvd.init(comm={ranks!r}): ranks {bad} are not in MPI_COMM_WORLD "
                             f"(size {world.size})")
        group = world.Get_group().Incl(ranks)
        try:
            return world.Create_group(group)
        finally:
            group.Free()
    try:
        from mpi4py import MPI
    except ImportError:
        raise ValueError("hvd.init(comm=...) takes a list of ranks or an mpi4py communicator; "
                         "mpi4py is not installed") from None
    if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise ValueError(f"hvd.init(comm=...) takes a list of ranks or an mpi4py communicator, "
                         f"not {comm!r}")
    return comm


class _CommStore:
    """The store hvd_init_store reads and writes, carried by an MPI communicator."""

    def __init__(self, comm):
        self._comm = comm
        self._mine = {}
        self._all = None

    def set(self, key, value):
        self._mine[key] = bytes(value)

    def get(self, key, timeout_ms):
        if key in self._mine:
            return self._mine[key]
        if self._all is None:
            self._all = {}
            for written in self._allgather(pickle.dumps(self._mine), timeout_ms):
                self._all.update(pickle.loads(written))
        if key not in self._all:
            raise TimeoutError(f"no rank of the communicator wrote {key}")
        return self._all[key]

    def _allgather(self, data, timeout_ms):
        """Every rank's data (bytes), in rank order, within timeout_ms: nonblocking
        collectives polled against the deadline (a blocking allgather would wait forever for
        a rank that never calls hvd.init)."""
        import numpy as np
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
        comm = self._comm
        sizes = np.empty(comm.size, dtype=np.int64)
        self._wait(comm.Iallgather(np.array([len(data)], dtype=np.int64), sizes), deadline)
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._wait(comm.Iallgatherv(np.frombuffer(data, dtype=np.uint8), [out, sizes]), deadline)
        offs = np.concatenate(([0], np.cumsum(sizes)))
        return [out[offs[r]:offs[r + 1]].tobytes() for r in range(comm.size)]

    def _wait(self, request, deadline):
        while not request.Test():
            if time.monotonic() > deadline:
                # (the request stays pending: init fails, and so does the job)
                raise TimeoutError(
                    f"rank {self._comm.rank} of the communicator (size {self._comm.size}) waited "
                    "for every rank to call hvd.init(comm=...); some rank did not come")
            time.sleep(0.0005)


def init(comm, timeout_seconds):
    """Initialise libhvd on comm's world; False when comm is the whole horovodrun job (the
    caller initialises as usual)."""
    mpi_comm = _communicator(comm)
    if mpi_comm is None:
        return False
    store = _CommStore(mpi_comm)
    _hvd.init_store(mpi_comm.rank, mpi_comm.size, None, store.set, store.get, timeout_seconds)
    return True
