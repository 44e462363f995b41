"""A straggler in a horovod.torch job, run at np 3 by test_jobs.py under horovodrun:

    straggler_job.py OUT_DIR [DELAY_S]

Rank 2 spends DELAY_S (default 0.06) seconds in its own code before each step's three named allreduces (as a rank
on a slower machine would); hvd.report_stragglers(5) asks rank 0 for a report every 5 steps,
and rank 0 writes a timeline to OUT_DIR/timeline.json. 40 steps, then hvd.report_stragglers(0)
and 10 steps more, which must report nothing. Then rank 2 runs out of data first (uneven
inputs): it calls hvd.shutdown() while rank 0 allreduces "one_more", and rank 1 asks for it
1.5 s later; both must fail at once naming it; each writes the seconds it waited and the
message to OUT_DIR/uneven<rank>.
"""
import os
import sys
import time

import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

out_dir = sys.argv[1]
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.06
hvd.init()
hvd.start_timeline(os.path.join(out_dir, "timeline.json"))
hvd.report_stragglers(5)


def step():
    if hvd.rank() == 2:
        time.sleep(delay)
    handles = [hvd.allreduce_async(torch.ones(100), name=f"grad.{i}") for i in range(3)]
    for h in handles:
        hvd.synchronize(h)


for _ in range(40):
    step()
hvd.report_stragglers(0)
print(f"rank {hvd.rank()}: off", file=sys.stderr, flush=True)
for _ in range(10):
    step()
hvd.stop_timeline()

if hvd.rank() == 2:
    hvd.shutdown()
    sys.exit(0)
if hvd.rank() == 1:
    # (rank 1 asks for its collective only after rank 2's shutdown has reached it, rank 0 at
    # once: the message names the collective either way)
    time.sleep(1.5)
start = time.monotonic()
try:
    hvd.allreduce(torch.ones(4), name="one_more")
    text = "no error"
except HorovodInternalError as e:
    text = str(e)
with open(os.path.join(out_dir, f"uneven{hvd.rank()}"), "w") as f:
    f.write(f"{time.monotonic() - start:.2f}\n{text}")
