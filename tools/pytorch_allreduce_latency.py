"""Per-call cost of one allreduce from Python: hvd.allreduce against
torch.distributed.all_reduce (gloo, or hvd's own torch.distributed backend), on float32
tensors of the given element counts.

    horovodrun -np 2 /usr/bin/python3 tools/pytorch_allreduce_latency.py \
        [--dist gloo|hvd] [--counts 1,262144] [--iters 2000] [--warmup 200] [--op adasum]

With hvd (no --dist) it times two forms: the blocking hvd.allreduce and
hvd.synchronize(hvd.allreduce_async(...)). Each rank times every call; the reported figure
is the median over the calls of the largest time over the ranks (the job waits for its
slowest rank), in microseconds, followed by rank 0's cpu probe (a fixed Python loop's time
right after: this machine kind runs at half speed for minutes at a time, and the probe says
which phase a figure fell in). --gloo runs the
same loop under torch.distributed (gloo backend) with horovodrun as its launcher; --dist hvd
under torch.distributed on the "hvd" backend (init_process_group("hvd"), the job's world). For the C
API's figure, run tools/hvd_allreduce_perf with the same sizes. --op adasum times
op=hvd.Adasum instead of the sum (the Horovod API only; Horovod 0.28.1 has it on CPU under
its MPI controller, on a power-of-two number of ranks).
"""
import argparse
import os
import time


def cpu_probe_ms():
    """The time of a fixed pure-Python loop, best of 3, in ms. These VMs run everything, a
    lone process included, at about half speed for minutes at a time: the probe, printed
    beside each figure, tells which phase the figure was measured in."""
    best = None
    for _ in range(3):
        start = time.perf_counter()
        x = 0
        for i in range(100000):
            x += i
        took = (time.perf_counter() - start) * 1e3
        best = took if best is None else min(best, took)
    return best

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--gloo", action="store_true", help="the same as --dist gloo")
parser.add_argument("--dist", choices=["gloo", "hvd"],
                    help="torch.distributed.all_reduce on this backend instead")
parser.add_argument("--counts", default="1,262144", help="float32 elements per call")
parser.add_argument("--iters", type=int, default=2000)
parser.add_argument("--warmup", type=int, default=200)
parser.add_argument("--port", type=int, default=29512)
parser.add_argument("--op", choices=["sum", "adasum"], default="sum",
                    help="the reduction (adasum: the Horovod API only)")


def main():
    args = parser.parse_args()
    torch.set_num_threads(1)
    backend = "gloo" if args.gloo else args.dist
    if backend and args.op != "sum":
        parser.error("--op adasum is for the Horovod API (no --dist/--gloo)")
    if backend:
        import torch.distributed as dist
        if backend == "hvd":
            import horovod.torch  # noqa: F401  (registers the backend)
            dist.init_process_group("hvd")
            rank, size = dist.get_rank(), dist.get_world_size()
        else:
            rank = int(os.environ.get("HOROVOD_RANK", 0))
            size = int(os.environ.get("HOROVOD_SIZE", 1))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(args.port))
            dist.init_process_group("gloo", rank=rank, world_size=size)

        def call(t):
            dist.all_reduce(t)
        calls = [(f"torch.distributed.all_reduce ({backend})", call)]

        def slowest(x):
            t = torch.tensor([x], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.item()
    else:
        import horovod.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        op = hvd.Adasum if args.op == "adasum" else hvd.Sum

        def call(t):
            hvd.allreduce(t, op=op, name="latency")

        def call_async(t):
            hvd.synchronize(hvd.allreduce_async(t, op=op, name="latency.async"))
        calls = [("hvd.allreduce", call), ("hvd.allreduce_async+synchronize", call_async)]

        def slowest(x):
            return hvd.allreduce(torch.tensor([x], dtype=torch.float64), op=hvd.Max,
                                 name="latency.max").item()
    for count in [int(c) for c in args.counts.split(",")]:
        t = torch.ones(count)
        for name, call in calls:
            for _ in range(args.warmup):
                call(t)
            times = []
            for _ in range(args.iters):
                start = time.perf_counter()
                call(t)
                times.append(time.perf_counter() - start)
            times.sort()
            median = slowest(times[len(times) // 2])
            probe = cpu_probe_ms()
            if rank == 0:
                print(f"{name}{' adasum' if args.op == 'adasum' else ''}: np {size}, "
                      f"{count} float32 ({4 * count} bytes): "
                      f"median {1e6 * median:.1f} us per call (cpu probe {probe:.1f} ms)",
                      flush=True)


if __name__ == "__main__":
    main()
