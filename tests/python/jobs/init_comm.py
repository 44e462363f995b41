"""hvd.init(comm=...) under an MPI launcher (tests/python/test_init_comm.py): the world is the
communicator's ranks. MODE: world (MPI.COMM_WORLD), split (two communicators of the even and
odd ranks: two hvd worlds side by side in one MPI job), list (the ranks [0, 1] and the rest,
as lists of global ranks)."""
import sys
import torch
from mpi4py import MPI
import horovod.torch as hvd
w = MPI.COMM_WORLD
mode = sys.argv[1]
if mode == "split":
    sub = w.Split(w.rank % 2, w.rank)
    hvd.init(comm=sub)
    assert hvd.size() == sub.size and hvd.rank() == sub.rank, (hvd.size(), hvd.rank())
    out = hvd.allreduce(torch.tensor([float(w.rank)]), op=hvd.Sum)
    want = sum(r for r in range(w.size) if r % 2 == w.rank % 2)
elif mode == "list":
    ranks = [0, 1] if w.rank < 2 else list(range(2, w.size))
    hvd.init(comm=ranks)
    out = hvd.allreduce(torch.tensor([float(w.rank)]), op=hvd.Sum)
    want = sum(ranks)
else:
    hvd.init(comm=w)
    out = hvd.allreduce(torch.tensor([float(w.rank)]), op=hvd.Sum)
    want = sum(range(w.size))
assert out.item() == want, (out, want)
# and a collective of more than the cycle message carries
big = hvd.allreduce(torch.full((100000,), float(w.rank)), op=hvd.Sum)
assert torch.all(big == want), big
print(f"rank {w.rank}: hvd rank {hvd.rank()} of {hvd.size()}, sum {out.item()} ok", flush=True)
hvd.shutdown()
