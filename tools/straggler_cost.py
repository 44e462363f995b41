"""What the straggler report (hvd.report_stragglers, HVD_STRAGGLER_STEPS) costs a training
step, measured in one job so that the machine's drift hits both sides alike:

    horovodrun -np 2 python tools/straggler_cost.py [--rounds 20] [--steps 20] [--every 10]
                                                    [--tiny]

A horovod.torch training step (an MLP of 784-1024-1024-1024-10, batch 8, DistributedOptimizer:
its gradients are 8 named allreduces a step; --tiny: one allreduce of one float, to see the
cost per collective where nothing hides it) runs in rounds of --steps steps, alternately
with the report off and on (every --every steps). Rank 0 prints the median step time of
each side over the rounds, their ratio and its spread (the ratios' 10th and 90th percentile
over the pairs of rounds). A benchmark, not a test.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=20)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--every", type=int, default=10)
parser.add_argument("--tiny", action="store_true")
args = parser.parse_args()

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                      nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))


one = torch.ones(1)


def steps(n):
    start = time.perf_counter()
    for _ in range(n):
        if args.tiny:
            hvd.allreduce(one, name="tiny")
            continue
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return (time.perf_counter() - start) / n


steps(20)  # warm-up (the response cache fills)
off, on = [], []
for r in range(args.rounds):
    for side in ((off, on) if r % 2 == 0 else (on, off)):
        hvd.report_stragglers(args.every if side is on else 0)
        side.append(steps(args.steps))
hvd.report_stragglers(0)
if hvd.rank() == 0:
    ratios = sorted(b / a for a, b in zip(off, on))
    q = statistics.quantiles(ratios, n=10)
    print(f"np {hvd.size()}{' --tiny' if args.tiny else ''}: step {statistics.median(off) * 1e3:.3f} ms with the report off, "
          f"{statistics.median(on) * 1e3:.3f} ms on (every {args.every} steps); on/off "
          f"median {statistics.median(ratios):.4f}, 10th-90th percentile "
          f"{q[0]:.4f}-{q[-1]:.4f} over {args.rounds} pairs of {args.steps} steps")
