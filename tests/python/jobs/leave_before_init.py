"""A rank that leaves before the others' hvd.init(), run by tests/python/test_jobs.py under
horovodrun:

    leave_before_init.py OUT_DIR VICTIM

Every rank calls hvd.init() and hvd.shutdown(); then rank VICTIM exits with status 0 while
the others call hvd.init() again (a re-initialisation). They must fail at once with an error
that is both a HorovodInternalError and a ValueError, naming the victim; each writes
OUT_DIR/rank<r>: the seconds its init took, the exception's classes and its message."""
import os
import sys
import time

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

out_dir, victim = sys.argv[1], int(sys.argv[2])
hvd.init()
rank = hvd.rank()
hvd.shutdown()
if rank == victim:
    sys.exit(0)
time.sleep(0.3)  # the victim is gone by now
t = time.monotonic()
try:
    hvd.init()
    result = "hvd.init() returned"
except Exception as e:  # noqa: B902 (what it is is the point)
    result = (f"{isinstance(e, HorovodInternalError)} {isinstance(e, ValueError)}\n{e}")
with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
    f.write(f"{time.monotonic() - t!r}\n{result}\n")
