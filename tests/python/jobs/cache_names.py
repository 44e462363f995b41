"""Many allreduces, each under a name never used again: unnamed ones (argv[1] "unnamed",
Horovod's "allreduce.noname.<n>") or explicitly named ones ("named"). Every result is checked;
test_jobs.py runs it with a tiny response cache and looks for the eviction warning."""
import sys

import torch

import horovod.torch as hvd

hvd.init()
kind = sys.argv[1]
for i in range(40):
    t = torch.full((3,), float(hvd.rank() + i))
    name = None if kind == "unnamed" else f"once.{i}"
    out = hvd.allreduce(t, op=hvd.Sum, name=name)
    want = float(sum(range(hvd.size())) + hvd.size() * i)
    assert out.tolist() == [want] * 3, (i, out.tolist(), want)
    # a repeated name in between: the cache must keep serving it right
    again = hvd.allreduce_(torch.ones(2), op=hvd.Sum, name="repeated")
    assert again.tolist() == [float(hvd.size())] * 2, again.tolist()
hvd.shutdown()
print("DONE", kind, flush=True)
