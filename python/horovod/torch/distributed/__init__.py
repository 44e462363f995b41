"""hvd as a torch.distributed backend: `dist.init_process_group("hvd")`.

Importing `horovod.torch` (or this module alone) registers the backend "hvd". A DDP script
written for gloo then runs on libhvd's transports by changing that one string:

    import horovod.torch  # registers "hvd"
    dist.init_process_group("hvd")

Where the world comes from:
 - under horovodrun, or after `hvd.init()`: the job's (hvd's rank and size; torch's must agree);
 - under torchrun or any env:// launcher, or with `store=`: libhvd forms its world through the
   c10d store torch hands the backend (hvd_init_store: every rank's data-plane address is
   exchanged there). The data plane authenticates with a job secret which rank 0 publishes in
   that store, unless HVD_SECRET_FILE (or _HOROVOD_SECRET_KEY) gives every rank the same one
   out of band.

Every collective becomes named operations of libhvd's engine (torch issues a group's
collectives in the same order on every member, so a per-group counter names them alike on
every rank), and its Work completes through a future that a completion thread fulfils as soon
as libhvd is done, whether or not anyone waits: DDP's bucket allreduces overlap the backward
pass as they do on gloo. `new_group(ranks)` is backed by an hvd process set.
"""
from horovod.torch.distributed._common import BACKEND
from horovod.torch.distributed._process_group import ProcessGroupHvd, _DTYPE_CODES  # noqa: F401
from horovod.torch.distributed._world import _env_handler, _store_callbacks  # noqa: F401
from horovod.torch.distributed import _compile  # noqa: F401 (torch.compile's hook)
from horovod.torch.distributed import _register  # noqa: F401 (registers the backend)

__all__ = ["BACKEND", "ProcessGroupHvd"]
# (_DTYPE_CODES, _env_handler, _store_callbacks: for the tests and tools/dist_key_cost.py)
