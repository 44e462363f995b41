"""horovod.run (Horovod's function API) driven the way a user's script drives it: functions
of __main__ travel to the ranks by value. Prints one line "RESULT <json>" for test_jobs.py."""
import json
import warnings

import horovod


def work(scale, offset=0):
    import torch
    import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
    return {"rank": hvd.rank(), "size": hvd.size(), "value": total * scale + offset}


def fails():
    import horovod.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank one gives up")
    hvd.barrier()
    return 0


out = {"results": horovod.run(work, args=(2,), kwargs={"offset": 1}, num_proc=2)}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["np_alias"] = horovod.run(work, args=(1,), np=3)
out["warned"] = [str(w.message) for w in caught]
try:
    horovod.run(fails, num_proc=2)
    out["failed"] = None
except RuntimeError as e:
    out["failed"] = str(e)
try:
    horovod.run(work, hosts="localhost:2", hostfile="hosts.txt")
    out["both"] = None
except ValueError as e:
    out["both"] = str(e)
print("RESULT " + json.dumps(out), flush=True)
