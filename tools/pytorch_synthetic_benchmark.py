"""Synthetic training throughput, in the shape of Horovod's pytorch_synthetic_benchmark.py,
sized for CPUs, with two peers to compare against:

    horovodrun -np 2 /usr/bin/python3 tools/pytorch_synthetic_benchmark.py          # hvd
    horovodrun -np 2 /usr/bin/python3 tools/pytorch_synthetic_benchmark.py --ddp    # DDP, gloo
    horovodrun -np 2 /usr/bin/python3 tools/pytorch_synthetic_benchmark.py --ddp --ddp-backend hvd
    horovodrun -np 2 /usr/bin/python3 tools/pytorch_synthetic_benchmark.py --no-comm

--ddp runs the same model, data and optimizer under torch.distributed's
DistributedDataParallel with the gloo backend (horovodrun is only its launcher: ranks come
from HOROVOD_RANK/HOROVOD_SIZE), or with --ddp-backend hvd on hvd's torch.distributed
backend (the job's world); --no-comm runs them with no communication at all, the limit
that perfect overlap of communication with computation would reach. Each iteration is
--num-batches-per-iter steps on random data; img/s per rank is reported with a 95% interval
(1.96 standard deviations over the iterations) and the total over the ranks.

--paired (with hvd) measures the distance to that limit in one job: every iteration times
its hvd steps and then as many steps of a twin model and optimizer that communicate nothing,
so that this machine's drift (20-30 % between runs on a shared 2-core host) hits both alike;
it reports the median over the iterations of hvd's img/s over the twin's. It also reports
the twin's mean step time over its mean per-step maximum across the ranks: what a step that
waits for its slowest rank (any synchronous data-parallel step, whatever its communication)
would reach with infinitely fast communication, on this machine at this moment.
"""
import argparse
import os
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description="PyTorch synthetic benchmark (hvd, DDP, none)")
parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"],
                    help="mlp: 784-1024-1024-1024-10; cnn: the Fashion-MNIST example's CNN")
parser.add_argument("--batch-size", type=int, default=8, help="input batch size per rank")
parser.add_argument("--num-warmup-batches", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--num-threads", type=int, default=0,
                    help="torch threads per rank (default: cores / ranks on this host)")
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--ddp", action="store_true", help="torch DDP with the gloo backend")
mode.add_argument("--no-comm", action="store_true", help="no communication (the limit)")
parser.add_argument("--ddp-port", type=int, default=29511)
parser.add_argument("--ddp-backend", default="gloo", choices=["gloo", "hvd"],
                    help="the torch.distributed backend of --ddp")
parser.add_argument("--ddp-noop-hook", action="store_true",
                    help="--ddp with a communication hook that sends nothing: what DDP itself "
                         "costs, the limit of any backend")
parser.add_argument("--ddp-sync-hook", action="store_true",
                    help="--ddp with a communication hook that allreduces one element per "
                         "bucket instead of the bucket: the ranks wait for each other as with "
                         "any backend, but move no data (the limit of a backend whose data "
                         "moved for free)")
parser.add_argument("--ddp-bucket-cap-mb", type=float, default=None,
                    help="--ddp with this bucket size (DDP's bucket_cap_mb; default DDP's 25): "
                         "smaller buckets start their allreduces earlier in the backward pass")
parser.add_argument("--paired", action="store_true",
                    help="hvd: also time a twin with no communication in every iteration")


def build_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                             nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(16, 32, 5),
                         nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(512, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def noop_hook(state, bucket):
    """A DDP communication hook that communicates nothing (--ddp-noop-hook)."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def sync_hook(one, bucket):
    """A DDP communication hook that synchronizes the ranks (a one-element allreduce) and
    leaves the bucket as it is (--ddp-sync-hook; state: that element)."""
    import torch.distributed as dist
    return dist.all_reduce(one, async_op=True).get_future().then(lambda _: bucket.buffer())


def main():
    args = parser.parse_args()
    if args.paired and (args.ddp or args.no_comm):
        parser.error("--paired measures hvd against no communication: not with --ddp/--no-comm")
    rank = int(os.environ.get("HOROVOD_RANK", "0"))
    size = int(os.environ.get("HOROVOD_SIZE", "1"))
    local_size = int(os.environ.get("HOROVOD_LOCAL_SIZE", "1"))
    if args.ddp:
        import torch.distributed as dist
        if args.ddp_backend == "hvd":
            import horovod.torch  # noqa: F401  (registers the backend)
            dist.init_process_group("hvd")
        else:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(args.ddp_port))
            dist.init_process_group("gloo", rank=rank, world_size=size)
        runtime = f"DDP ({args.ddp_backend})"
    elif not args.no_comm:
        import horovod.torch as hvd
        hvd.init()
        rank, size, local_size = hvd.rank(), hvd.size(), hvd.local_size()
        runtime = "hvd"
    else:
        runtime = "no communication"
    torch.set_num_threads(args.num_threads or max(1, (os.cpu_count() or 1) // local_size))
    torch.manual_seed(1)
    model = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size)
    twin = build_model(args.model)
    twin.load_state_dict(model.state_dict())
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.01 * size)
    if args.ddp:
        bucket = {} if args.ddp_bucket_cap_mb is None else {"bucket_cap_mb": args.ddp_bucket_cap_mb}
        model = nn.parallel.DistributedDataParallel(model, **bucket)
        if args.ddp_noop_hook:
            model.register_comm_hook(None, noop_hook)
        elif args.ddp_sync_hook:
            model.register_comm_hook(torch.zeros(1), sync_hook)
    elif not args.no_comm:
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 1, 28, 28)
    target = torch.randint(0, 10, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    twin_times = []

    def twin_step():
        t0 = timeit.default_timer()
        twin_optimizer.zero_grad()
        loss = F.cross_entropy(twin(data), target)
        loss.backward()
        twin_optimizer.step()
        twin_times.append(timeit.default_timer() - t0)

    def log(s):
        if rank == 0:
            print(s, flush=True)

    params = sum(p.numel() for p in model.parameters())
    log(f"Model: {args.model} ({params * 4 / 1e6:.1f} MB of float32 gradients per step)")
    log(f"Runtime: {runtime}")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of ranks: {size}")
    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    if args.paired:
        timeit.timeit(twin_step, number=args.num_warmup_batches)
        twin_times.clear()
    log("Running benchmark...")
    img_secs, ratios = [], []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        line = (f"Iter #{x}: {img_sec:.1f} img/sec per rank ({1000 * t / args.num_batches_per_iter:.2f} "
                "ms per step)")
        if args.paired:
            # the twin's steps start together on every rank: hvd's last step ended in an
            # allreduce, so no rank is ahead
            t_twin = timeit.timeit(twin_step, number=args.num_batches_per_iter)
            ratios.append(t_twin / t)
            line += f"; no communication {1000 * t_twin / args.num_batches_per_iter:.2f} ms per step"
        log(line)
        img_secs.append(img_sec)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {size} rank(s): {size * mean:.1f} +-{size * conf:.1f}")
    if args.paired:
        log(f"Paired hvd/no-communication: median {np.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} iterations")
        steps = np.array(hvd.allgather_object(twin_times))  # ranks x steps
        log(f"Synchronous-step ceiling (no communication, each step waiting for the slowest "
            f"rank): {steps.mean() / steps.max(axis=0).mean():.3f}")
    if args.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
