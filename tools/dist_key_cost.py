"""What the torch backend's mismatch and deadline checks cost per collective: a blocking
one-element allreduce through the backend's own path into libhvd (_hvd.run), with and without
a key and a deadline, interleaved (rounds of N calls each), then the backend's Python side of
them (the sequence number and the key string) timed alone. Run under any launcher:

    PYTHONPATH=build/python build/horovodrun -np 2 python3 tools/dist_key_cost.py [ROUNDS] [N]

Rank 0 prints both per-call times per round, their difference, and the Python side's cost."""
import sys
import threading
import time
import timeit

import torch
import torch.distributed as dist

import horovod.torch  # noqa: F401  (registers the "hvd" backend)
from horovod import _hvd
from horovod.torch import distributed as backend

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
dist.init_process_group("hvd")
t = torch.ones(1)
ptr = t.data_ptr()
item = (None, ptr, ptr, backend._DTYPE_CODES[t.dtype], (1,), _hvd.SUM, 1.0, 1.0, 0, None, 0,
        False)
times = {"with": [], "without": []}
for r in range(rounds):
    for mode in ("without", "with"):  # (interleaved: the machine's speed drifts)
        start = time.perf_counter()
        for i in range(n):
            name = f"keycost.{i % 16}"
            if mode == "with":
                _hvd.run(_hvd.ALLREDUCE, (name,) + item[1:], 30000, f"keycost#{r}.{i}")
            else:
                _hvd.run(_hvd.ALLREDUCE, (name,) + item[1:])
        times[mode].append((time.perf_counter() - start) / n * 1e6)
pg = backend.ProcessGroupHvd.__new__(backend.ProcessGroupHvd)
pg._lock, pg._seq, pg._prefix = threading.Lock(), 0, "dist.0"
calls = 200000
python_us = timeit.timeit(lambda: pg._keys(1, pg._next()), number=calls) / calls * 1e6
if dist.get_rank() == 0:
    for mode, v in times.items():
        print(f"{mode} a key and a deadline: us per call", [round(x, 2) for x in v])
    print("difference per round, us:",
          sorted(round(a - b, 2) for a, b in zip(times["with"], times["without"])))
    print(f"the backend's Python side (sequence number and key): {python_us:.2f} us")
dist.destroy_process_group()
