"""A rank SIGKILLs itself in the middle of training; every survivor must raise
HorovodInternalError promptly. Run under horovodrun by test_jobs.py.

The survivors ignore SIGTERM so that horovodrun's kill-all (which follows the victim's death)
does not end them before the library reports the failure; they record when they saw the
error, and the victim records when it died, in OUT_DIR.
"""
import os
import signal
import sys
import time

import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

out_dir = sys.argv[1]
victim = int(sys.argv[2])
hvd.init()
rank = hvd.rank()
if rank != victim:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
t = torch.ones(1000)
try:
    for step in range(1000000):
        if rank == victim and step == 50:
            with open(os.path.join(out_dir, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(t, name="grad")
except HorovodInternalError as e:
    seen = time.time()
    with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
        f.write(f"{seen!r}\n{e}\n")
    sys.exit(0)
