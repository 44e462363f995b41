"""A straggler in a horovod.torch job, run at np 3 by test_jobs.py under horovodrun:

    straggler_job.py OUT_DIR

Rank 2 spends 60 ms in its own code before each step's three named allreduces (as a rank
on a slower machine would); hvd.report_stragglers(5) asks rank 0 for a report every 5 steps,
and rank 0 writes a timeline to OUT_DIR/timeline.json. 40 steps, then hvd.report_stragglers(0)
and 10 steps more, which must report nothing.
"""
import os
import sys
import time

import torch

import horovod.torch as hvd

out_dir = sys.argv[1]
hvd.init()
hvd.start_timeline(os.path.join(out_dir, "timeline.json"))
hvd.report_stragglers(5)


def step():
    if hvd.rank() == 2:
        time.sleep(0.06)
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
