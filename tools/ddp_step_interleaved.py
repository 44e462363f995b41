"""A DDP training step on hvd's torch.distributed backend against its peers, all in the same
processes and taken in turn (a benchmark, not a test):

    horovodrun -np 2 /usr/bin/python3 tools/ddp_step_interleaved.py [--batch-size 8]

Separate jobs for each peer (tools/compare_dist.sh) are at the mercy of this kind of machine's
drift: a 2-core VM's speed swings 20-30 % from one minute to the next, more than the
differences measured. Here every peer is a model of its own in one job: the job runs rounds,
and each round takes --steps steps of every peer in turn, so a slow minute hits them all
alike. The peers (the MLP 784-1024-1024-1024-10 of tools/pytorch_synthetic_benchmark.py,
the same data, SGD):

  ddp-hvd       DDP on the "hvd" backend, DDP's defaults
  ddp-gloo      DDP on a gloo group of the same ranks (dist.new_group(backend="gloo"))
  distopt       horovod.torch's DistributedOptimizer
  ddp-hvd-tuned DDP on hvd with gradient_as_bucket_view=True and bucket_cap_mb=2 (no
                copies of the gradients into DDP's buckets and back; smaller buckets, whose
                allreduces start earlier in the backward pass)
  ddp-gloo-tuned the same on gloo
  ddp-sync      DDP on hvd whose communication hook only synchronizes the ranks (a
                one-element allreduce per bucket): the step of a backend that moved its data
                for free, its ranks still waiting for the slowest
  fsdp-hvd      FullyShardedDataParallel (torch 2) on the "hvd" backend: parameters sharded,
                gathered for each forward and backward (all_gather_into_tensor), gradients
                reduce-scattered
  fsdp-gloo     the same on gloo
  local         no DDP and no gradients exchanged, one one-element allreduce per step so that
                the ranks stay in step: what the computing costs (the floor)

For each peer it prints the median step time over all its steps, the range of the rounds'
medians (the spread), total img/s, the step time over DDP-on-gloo's and over
DistributedOptimizer's, and, with local among the peers, the time over the floor (what the
exchange adds to a step) over gloo's (DDP's over ddp-gloo's, FSDP's over fsdp-gloo's).
--peers picks some (the FSDP ones are left out by default on torch 1.13, whose FSDP is older). horovodrun or torchrun launches it (ranks from RANK/WORLD_SIZE, else
HOROVOD_RANK/HOROVOD_SIZE); gloo meets through torch's TCPStore at MASTER_ADDR:MASTER_PORT
(default 127.0.0.1 and --port). gloo's group and hvd's share the
cores: each peer's threads are idle while another's steps run.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_synthetic_benchmark import build_model, sync_hook  # noqa: E402

import horovod.torch as hvd  # noqa: E402  (also registers the "hvd" backend)

PEERS = ["ddp-hvd", "ddp-gloo", "distopt", "ddp-hvd-tuned", "ddp-gloo-tuned", "ddp-sync",
         "fsdp-hvd", "fsdp-gloo", "local"]
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
DEFAULT_PEERS = [p for p in PEERS if TORCH2 or not p.startswith("fsdp")]

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--batch-size", type=int, default=8, help="input batch size per rank")
parser.add_argument("--rounds", type=int, default=12)
parser.add_argument("--steps", type=int, default=5, help="steps of each peer per round")
parser.add_argument("--warmup", type=int, default=3, help="rounds of one step each, not timed")
parser.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                    help="comma-separated, of: " + ", ".join(PEERS))
parser.add_argument("--port", type=int, default=29517, help="MASTER_PORT when it is not set")


def keep_in_step():
    """The ranks leave a step of the peer that exchanges nothing together, as DDP's do."""
    hvd.allreduce(torch.zeros(1), name="ddp_step_interleaved.local")


def make_peers(names, gloo, lr):
    """name -> (model, optimizer, what runs after each step or None)."""
    peers = {}
    for name in names:
        torch.manual_seed(1)
        model = build_model("mlp")
        after = None
        if name.startswith("ddp-"):
            kwargs = {}
            if name.endswith("-tuned"):
                kwargs = {"gradient_as_bucket_view": True, "bucket_cap_mb": 2}
            if "gloo" in name:
                kwargs["process_group"] = gloo
            model = nn.parallel.DistributedDataParallel(model, **kwargs)
            if name == "ddp-sync":
                model.register_comm_hook(torch.zeros(1), sync_hook)
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        elif name.startswith("fsdp-"):
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            group = gloo if "gloo" in name else None
            model = FSDP(model, process_group=group, device_id=torch.device("cpu"))
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        elif name == "distopt":
            optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                                 named_parameters=model.named_parameters())
        else:  # local
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            after = keep_in_step
        peers[name] = (model, optimizer, after)
    return peers


def main():
    args = parser.parse_args()
    names = [n for n in args.peers.split(",") if n]
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; the peers: {', '.join(PEERS)}")
    rank = int(os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "0")))
    size = int(os.environ.get("WORLD_SIZE", os.environ.get("HOROVOD_SIZE", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("hvd", rank=rank, world_size=size)
    hvd.init()
    local_size = hvd.local_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_size))
    gloo = dist.new_group(list(range(size)), backend="gloo") if any(
        "gloo" in n for n in names) else None
    peers = make_peers(names, gloo, 0.01 * size)
    data = torch.randn(args.batch_size, 1, 28, 28)
    target = torch.randint(0, 10, (args.batch_size,))

    def step(model, optimizer, after):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()
        if after is not None:
            after()
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        for p in peers.values():
            step(*p)
    times = {n: [] for n in names}  # name -> rounds -> step times
    for _ in range(args.rounds):
        for n, p in peers.items():
            times[n].append([step(*p) for _ in range(args.steps)])
    if rank == 0:
        report(times, args.rounds, args.batch_size, size)
    dist.destroy_process_group()


def report(times, nrounds, batch, size):
    med = {n: statistics.median(t for r in rounds for t in r) for n, rounds in times.items()}
    print(f"DDP step, MLP 784-1024-1024-1024-10, np {size}, batch {batch} per rank: "
          f"{nrounds} rounds; step time median (ms), the range of the "
          "rounds' medians, total img/s, and step time over the peers'")
    for n, rounds in times.items():
        per_round = [statistics.median(r) for r in rounds]
        line = (f"  {n:15s} {1000 * med[n]:8.2f} ms ({1000 * min(per_round):.2f}-"
                f"{1000 * max(per_round):.2f})  {size * batch / med[n]:7.1f} img/s")
        for peer in ("ddp-gloo", "distopt"):
            if peer in med and peer != n:
                line += f"  /{peer} {med[n] / med[peer]:.3f}"
        gloo_twin = n.split("-")[0] + "-gloo" + ("-tuned" if n.endswith("-tuned") else "")
        if "local" in med and n.endswith(("-hvd", "-hvd-tuned")) and gloo_twin in med:
            over = (med[n] - med["local"]) / (med[gloo_twin] - med["local"])
            line += f"  over-floor/{gloo_twin}'s {over:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
