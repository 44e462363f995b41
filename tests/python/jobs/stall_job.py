"""Stalls in a horovod.torch job, run at np 2 by test_jobs.py under horovodrun with
HOROVOD_STALL_CHECK_TIME_SECONDS=1, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3 and
HVD_STALL_STACKS=1:

    stall_job.py OUT_DIR

0. Mismatch: under the name "x" rank 0 allreduces while rank 1 broadcasts; then under "y",
   which both ranks have allreduced once (so that rank 0's is a response-cache hit), the
   same. Each rank records the exception's type, the seconds it took, and its message in
   OUT_DIR/mismatch_<name><rank>.
1. Late: rank 1 spends 2.5 s in its own code (sleeping_in_user_code) while rank 0 waits in
   allreduce "late": rank 0's stall warnings name rank 1, its pid and that it runs its own
   code; rank 1 prints its Python stack. Then both finish "late".
2. Never: rank 1 sleeps for good in never_coming_back while rank 0 waits in allreduce
   "never": after the shutdown time, rank 0's allreduce raises HorovodInternalError, whose
   text and time it records in OUT_DIR/never (seconds waited, then the message).
OUT_DIR/pid<rank>: each rank's pid.
"""
import os
import sys
import time

import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

out_dir = sys.argv[1]
hvd.init()
rank = hvd.rank()
with open(os.path.join(out_dir, f"pid{rank}"), "w") as f:
    f.write(str(os.getpid()))
hvd.allreduce(torch.ones(3), name="warm")


def mismatch(name):
    t = torch.ones(3)
    start = time.monotonic()
    try:
        if rank == 0:
            hvd.allreduce(t, name=name)
        else:
            hvd.broadcast(t, 0, name=name)
        text = "None\n0\nno error"
    except Exception as e:  # (what a Horovod user catches: the type is recorded)
        text = f"{type(e).__name__}\n{time.monotonic() - start:.2f}\n{e}"
    with open(os.path.join(out_dir, f"mismatch_{name}{rank}"), "w") as f:
        f.write(text)


mismatch("x")
hvd.allreduce(torch.ones(3), name="y")
mismatch("y")


def sleeping_in_user_code(seconds):
    time.sleep(seconds)


def never_coming_back():
    time.sleep(600)


if rank == 1:
    sleeping_in_user_code(2.5)
hvd.allreduce(torch.ones(3), name="late")

if rank == 1:
    never_coming_back()
start = time.monotonic()
try:
    hvd.allreduce(torch.ones(3), name="never")
    text = "no error"
except HorovodInternalError as e:
    text = str(e)
with open(os.path.join(out_dir, "never"), "w") as f:
    f.write(f"{time.monotonic() - start:.2f}\n{text}")
sys.exit(1)
