#!/usr/bin/python3
"""PyTorch gloo peer for tools/compare_allreduce.sh: float32 all_reduce(SUM) latency.

Usage: /usr/bin/python3 gloo_allreduce_bench.py [-np N] [-b MINBYTES] [-e MAXBYTES]
                                               [-f FACTOR] [-w WARMUP] [-n ITERS]
Same measurement and output as mpi_allreduce_bench.c: for every size rank 0 prints
`size_bytes median_us wrong`, the largest over ranks of each rank's median per-iteration time
and the number of wrong result elements over all ranks. Spawns its own N processes and meets
them over 127.0.0.1 (MASTER_PORT from the environment, else a free port).
"""
import argparse
import os
import socket
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    if s and s[-1].upper() in mult:
        v = int(s[:-1]) * mult[s[-1].upper()]
    else:
        v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"negative size {s}")
    return v


def sizes(args):
    b = args.b
    while b <= args.e:
        yield b
        if args.f < 2:
            return
        b *= args.f


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def worker(rank, args, port):
    # Set before torch starts any pool: one compute thread per rank, as the C peers have.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(args.np))
    # Without this gloo picks the address the host name resolves to; only loopback is wanted.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.np)
    n = args.np
    expect = n * (n + 1) / 2  # every rank contributes rank+1: exact in float32
    if rank == 0:
        print(f"# gloo_allreduce_bench np={n} float32 sum: size_bytes median_us wrong", flush=True)
    for nbytes in sizes(args):
        t = torch.empty(max(1, nbytes // 4), dtype=torch.float32)
        for _ in range(args.w):
            t.fill_(rank + 1)
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        dist.barrier()  # start the timed loop together, as the MPI peer does
        times = []
        for _ in range(args.n):
            # all_reduce is in place: refill (untimed) so every call sums the same inputs.
            t.fill_(rank + 1)
            t0 = time.monotonic_ns()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            times.append((time.monotonic_ns() - t0) / 1e3)
        wrong = torch.tensor([float((t != expect).sum().item())], dtype=torch.float64)
        med = torch.tensor([median(times)], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"{nbytes} {med.item():.2f} {int(wrong.item())}", flush=True)
    dist.destroy_process_group()


def free_port():
    # Small race (the port is free again until rank 0 binds it); MASTER_PORT overrides.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-np", type=int, default=2)
    p.add_argument("-b", type=parse_size, default=8)
    p.add_argument("-e", type=parse_size, default=8 << 20)
    p.add_argument("-f", type=int, default=2)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("-n", type=int, default=20)
    args = p.parse_args()
    if args.np < 1 or args.b < 1 or args.e < args.b or args.n < 1 or args.w < 0:
        p.error("need -np >= 1, 1 <= -b <= -e, -n >= 1, -w >= 0")
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        sys.exit(f"torch not importable ({e}); install python3-torch")
    port = int(os.environ.get("MASTER_PORT") or free_port())
    # spawn (not fork): each rank gets a clean interpreter, and a failing rank fails the job.
    mp.spawn(worker, args=(args, port), nprocs=args.np, join=True)


if __name__ == "__main__":
    main()
