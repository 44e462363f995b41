"""The exceptions Horovod's users catch."""
from horovod import _hvd


class HorovodInternalError(RuntimeError):
    """A collective failed inside the runtime: a peer was lost, a wait timed out, ranks
    disagreed, or hvd was shut down. The message names the rank, host and tensor. In elastic
    mode, hvd.elastic.run restores the last commit and carries on."""


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic mode: the set of hosts changed; raised at a commit, on every rank alike.
    `skip_sync` tells whether the state may be kept as it is (hosts were only removed)."""

    def __init__(self, skip_sync=False):
        super().__init__()
        self.skip_sync = skip_sync


def get_version_mismatch_message(name, version, installed_version):
    return (f"Framework {name} installed with version {installed_version} but found version "
            f"{version}. This can result in unexpected behavior including runtime errors. "
            "Reinstall Horovod using `pip install --no-cache-dir` to build with the new version.")


class HorovodVersionMismatchError(ImportError):
    """The framework's version differs from the one Horovod was built against (never raised by
    hvd, whose extension does not link the framework; kept for code that catches it)."""

    def __init__(self, name, version, installed_version):
        super().__init__(get_version_mismatch_message(name, version, installed_version))
        self.name = name
        self.version = version
        self.installed_version = installed_version


class HorovodInitPeerLostError(HorovodInternalError, ValueError):
    """hvd.init() failed because a rank was lost before it checked in (it died, or exited
    instead of calling hvd.init()): a ValueError like every failed init, and a
    HorovodInternalError like every lost peer. The message names the rank, its host and how
    it ended."""


_hvd.set_exceptions(HorovodInternalError, HostsUpdatedInterrupt, HorovodInitPeerLostError)
