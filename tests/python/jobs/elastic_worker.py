"""A deterministic elastic PyTorch worker for the elastic tests and the recovery benchmark
(tests/python/test_elastic.py, scripts/bench-elastic-recovery.sh), the Python twin of
tests/e2e/elastic_worker.c:

    horovodrun --host-discovery-script d.sh -np 3 --min-np 2 /usr/bin/python3 elastic_worker.py
        --steps N --commit-every K [--sleep-ms M] [--state-mb S] [--print-pid] [--bench]

The state is an hvd.elastic.TorchState: a model (a 4-element weight, and a float32 buffer of S
MB, default 8 KiB, both in its state_dict), an SGD optimizer with momentum wrapped in
DistributedOptimizer, and the plain attributes step and acc. Each step every rank
allreduces (Average) the value `step`, which every rank computes alike, so the result must
be step itself (a rank whose step differs is caught at once); acc += result; the loss
sum(w) is backpropagated (gradient 1 on every rank, averaged: 1) and the optimizer steps;
three buffer elements get +1; step += 1. Every K steps the state is committed and rank 0
prints "commit <step / K> step <step> size <world size> acc <acc>" (the counter only grows,
whatever failures and resets happen). At the end every rank checks acc == N (N - 1) / 2, the
buffer's sum == 3 N and w == the weights of N momentum-SGD steps computed alone, so progress
lost or counted twice fails the run (exit 1), and rank 0 prints
"done step <N> acc <acc> resets <resets>".
--print-pid: after every (re)initialisation every rank prints "pid <rank> <host> <pid>".
--bench: after every reset rank 0 prints, once the first step of the new world completed,
"recovered <ms since the reset callback> <CLOCK_REALTIME ms>".
"""
import argparse
import os
import sys
import time

import torch

import horovod.torch as hvd

LR, MOMENTUM = 0.01, 0.9

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--commit-every", type=int, required=True)
parser.add_argument("--sleep-ms", type=int, default=0)
parser.add_argument("--state-mb", type=float, default=8 / 1024)
parser.add_argument("--print-pid", action="store_true")
parser.add_argument("--bench", action="store_true")
args = parser.parse_args()


class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))
        self.register_buffer("big", torch.zeros(n))


def expected_weights(steps):
    """N steps of momentum SGD with gradient 1, alone, in the same float32 arithmetic."""
    m = Model(1)
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM)
    for _ in range(steps):
        opt.zero_grad()
        m.w.sum().backward()
        opt.step()
    return m.w.detach()


def say_pid():
    if args.print_pid:
        print(f"pid {hvd.rank()} {os.environ.get('HOROVOD_HOSTNAME', 'localhost')} "
              f"{os.getpid()}", flush=True)


hvd.init()
torch.set_num_threads(1)
model = Model(max(1, int(args.state_mb * (1 << 20)) // 4))
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
    named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, acc=0.0)
resets = {"n": 0, "at": None}


def on_reset():
    resets["n"] += 1
    resets["at"] = time.monotonic()
    say_pid()


state.register_reset_callbacks([on_reset])
say_pid()


@hvd.elastic.run
def train(state):
    big = state.model.big
    while state.step < args.steps:
        v = hvd.allreduce(torch.tensor(float(state.step), dtype=torch.float64), name="v")
        if v.item() != state.step:
            print(f"rank {hvd.rank()}: step {state.step} but the ranks' average is {v.item()}",
                  file=sys.stderr, flush=True)
            sys.exit(1)
        state.acc += v.item()
        state.optimizer.zero_grad()
        state.model.w.sum().backward()
        state.optimizer.step()
        for j in range(3):
            big[(3 * state.step + j) % big.numel()] += 1
        state.step += 1
        if resets["at"] is not None and args.bench and hvd.rank() == 0:
            print(f"recovered {1000 * (time.monotonic() - resets['at']):.0f} "
                  f"{time.time_ns() // 1_000_000}", flush=True)
        resets["at"] = None
        if state.step % args.commit_every == 0:
            if hvd.rank() == 0:
                print(f"commit {state.step // args.commit_every} step {state.step} "
                      f"size {hvd.size()} acc {state.acc}", flush=True)
            state.commit()
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)


train(state)
n = args.steps
ok = state.acc == n * (n - 1) / 2 and model.big.sum().item() == 3 * n and \
    torch.equal(model.w.detach(), expected_weights(n))
if not ok:
    print(f"rank {hvd.rank()}: wrong result: acc {state.acc}, buffer sum "
          f"{model.big.sum().item()}, w {model.w.tolist()} (want {n * (n - 1) / 2}, {3 * n}, "
          f"{expected_weights(n).tolist()})", file=sys.stderr, flush=True)
    sys.exit(1)
if hvd.rank() == 0:
    print(f"done step {n} acc {state.acc} resets {resets['n']}", flush=True)
