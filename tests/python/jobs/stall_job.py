"""Stalls in a horovod.torch job, run at np 2 by test_jobs.py under horovodrun with
HOROVOD_STALL_CHECK_TIME_SECONDS=1, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3 and
HVD_STALL_STACKS=1:

    stall_job.py OUT_DIR

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
