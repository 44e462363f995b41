"""Life cycle and topology of a Horovod job: the functions horovod.torch re-exports."""
import atexit
import os

from horovod import _hvd
from horovod.common import exceptions  # noqa: F401  (registers the exception classes)
from horovod.common import mpi_comm
from horovod.common import process_sets as _ps
from horovod.common import util


def _stacks_on_request():
    """HVD_STALL_STACKS=1: a stall warning asks the ranks it names as missing for their
    stacks, which libhvd does by sending SIGUSR2 to such a rank when something handles it.
    faulthandler handles it here, printing every thread's Python stack to stderr (under
    horovodrun, tagged with the rank), in C, whatever the main thread is doing."""
    if util.env_flag("HVD_STALL_STACKS"):
        import faulthandler
        import signal
        import sys
        faulthandler.register(signal.SIGUSR2, file=sys.__stderr__, all_threads=True)


_stacks_on_request()


class HorovodBasics:
    """Horovod's basics over libhvd. One instance, `_basics`, serves the package."""

    def __init__(self):
        self._atexit_registered = False
        self._shutdown_hooks = []

    def init(self, comm=None, process_sets=None):
        """Initialise hvd: meet the other ranks through horovodrun's rendezvous (alone: a job
        of one). `comm`: an mpi4py communicator or a list of global ranks, whose ranks are then
        the world (common/mpi_comm.py). `process_sets`: a list of ProcessSet to register now,
        or "dynamic" to allow add_process_set later."""
        static_sets = None
        if isinstance(process_sets, str) and process_sets.lower() == "dynamic":
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        elif process_sets is not None:
            static_sets = list(process_sets)
        was_initialized = _hvd.is_initialized()
        if was_initialized or comm is None or (isinstance(comm, list) and not comm) or \
                not mpi_comm.init(comm, int(os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "0"))):
            _hvd.init(util.env_flag("HOROVOD_ELASTIC"))
        if not was_initialized:
            _ps._setup(static_sets, util.env_flag("HOROVOD_DYNAMIC_PROCESS_SETS"))
        if not self._atexit_registered:
            atexit.register(self.shutdown)
            self._atexit_registered = True

    def shutdown(self):
        """Shut hvd down (pending operations fail); init may be called again."""
        for hook in self._shutdown_hooks:
            hook()
        _ps._teardown()
        _hvd.shutdown()

    def _after_reinit(self):
        """Elastic: libhvd left the old world and joined a new one (hvd.elastic.run); what
        belonged to the old one is gone. As after Horovod's shutdown() + init(): only the
        global process set remains."""
        for hook in self._shutdown_hooks:
            hook()
        _ps._teardown()
        _ps._setup(None, _ps._dynamic_enabled())

    def is_initialized(self):
        return _hvd.is_initialized()

    def _topology(self, value):
        if value < 0:
            raise ValueError("Horovod has not been initialized; use hvd.init().")
        return value

    def size(self):
        """Number of ranks in the job."""
        return self._topology(_hvd.size())

    def local_size(self):
        """Number of ranks on this host."""
        return self._topology(_hvd.local_size())

    def cross_size(self):
        """Number of hosts that have a rank with this process's local rank."""
        return self._topology(_hvd.cross_size())

    def rank(self):
        """This process's rank in the job."""
        return self._topology(_hvd.rank())

    def local_rank(self):
        """This process's rank among the ranks of its host."""
        return self._topology(_hvd.local_rank())

    def cross_rank(self):
        """The index of this process's host among those with its local rank."""
        return self._topology(_hvd.cross_rank())

    def is_homogeneous(self):
        """True when every host runs the same number of ranks."""
        self._topology(_hvd.size())
        return _hvd.is_homogeneous()

    def mpi_threads_supported(self):
        raise ValueError("Horovod MPI is not enabled; Please make sure it's installed and "
                         "enabled.")

    def mpi_enabled(self):
        return False

    def mpi_built(self):
        return util.mpi_built()

    def gloo_enabled(self):
        """hvd's controller is the gloo-compatible one: enabled once initialised."""
        return _hvd.is_initialized()

    def gloo_built(self):
        return util.gloo_built()

    def nccl_built(self):
        return util.nccl_built()

    def ddl_built(self):
        return util.ddl_built()

    def ccl_built(self):
        return util.ccl_built()

    def cuda_built(self):
        return util.cuda_built()

    def rocm_built(self):
        return util.rocm_built()

    def start_timeline(self, file_path, mark_cycles=False):
        """Start writing a Chrome-trace timeline to file_path (rank 0 writes it)."""
        if not file_path:
            raise ValueError("file_path must not be empty")
        _hvd.start_timeline(str(file_path), bool(mark_cycles))

    def stop_timeline(self):
        _hvd.stop_timeline()

    def report_stragglers(self, steps):
        """hvd's own: every `steps` steps (a step: the first named collective comes round
        again), rank 0 logs each rank's average lateness in arriving at the collectives and
        the rank most often last, and marks it in the timeline; 0 stops it. Rank 0's call
        counts (HVD_STRAGGLER_STEPS sets it at init)."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be a non-negative int, not {steps!r}")
        _hvd.report_stragglers(steps)


_basics = HorovodBasics()
