"""DDP training written for torch.distributed, run by tests/python/test_dist_jobs.py under
torchrun or horovodrun with a backend named on the command line:

    ddp_job.py BACKEND OUT_DIR [train,]MODE[,uneven] [ARG]

MODE train: train a fixed model on fixed data and save rank 0's final weights to
  OUT_DIR/weights.pt; with BACKEND hvd, train the same model again over a gloo group of the
  same ranks, in the same processes, to OUT_DIR/gloo_weights.pt (a job's start-up costs more
  than its training: one job compares the two backends, whose weights must be equal).
MODE kill VICTIM: rank VICTIM SIGKILLs itself in the middle of training; every survivor
  records when its collective raised and the message, then checks that its next collective
  raises too (OUT_DIR/rank<r>), ignoring SIGTERM so that the launcher's kill-all does not end
  it first.
MODE stop VICTIM: the same with SIGSTOP; the survivors' error comes once the process group's
  timeout (ARG seconds) expires.
MODE exit_in_callback: the script ends while a callback of an operation's future still runs on
  the completion thread (a slow then()); it must end with status 0 after the callback has
  finished (OUT_DIR/callback<r>), never abort in Python's finalization. Followed by ",uneven":
  first rank 1 leaves (destroy_process_group) while rank 0 waits in one more all_reduce
  (OUT_DIR/uneven0: how long it waited, and its error).
MODE resume VICTIM: a checkpoint every step; rank VICTIM is SIGKILLed at step 5, once in the
  job (OUT_DIR/killed; not by the restart count, which agents on two hosts may not agree on);
  torchrun --max_restarts starts every worker again, which resume from the checkpoint and
  finish (OUT_DIR/done<r>: the step they resumed at, the restart count and a weight checksum).
"""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import horovod.torch  # noqa: F401  (registers the "hvd" backend)

backend, out_dir, modes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
victim = int(sys.argv[4]) if len(sys.argv) > 4 else -1
timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 60
if timeout < 60:
    # A short timeout bounds init_process_group's rendezvous too; ranks that import torch
    # seconds apart (the sanitizer pass on a loaded machine) would miss it. Meet first.
    me, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # torchrun sets both
    open(os.path.join(out_dir, f"arrived{me}"), "w").close()
    while not all(os.path.exists(os.path.join(out_dir, f"arrived{r}")) for r in range(world)):
        time.sleep(0.05)
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
rank, size = dist.get_rank(), dist.get_world_size()


def make_ddp(group=None):
    """A fixed model, DDP over group (None: the default one), and its optimizer."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 5))
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
    return model, ddp, torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)


model, ddp, opt = make_ddp()


def batch(step):
    g = torch.Generator().manual_seed(step * 100 + rank)
    return torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g)


def step_once(step, ddp=ddp, opt=opt):
    opt.zero_grad()
    x, y = batch(step)
    nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()


def train(model, ddp, opt, out):
    for step in range(30):
        step_once(step, ddp, opt)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(out_dir, out))


if modes[0] == "train":  # (and then the next mode, if any)
    train(model, ddp, opt, "weights.pt")
    if backend == "hvd":
        train(*make_ddp(dist.new_group(backend="gloo")), "gloo_weights.pt")
    modes = modes[1:]
mode = modes[0] if modes else None

if mode in ("kill", "stop"):
    if rank != victim:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        for step in range(1000000):
            if rank == victim and step == 20:
                with open(os.path.join(out_dir, "killed"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
            step_once(step)
    except RuntimeError as e:
        seen = time.time()
        try:
            t = torch.ones(4)
            dist.all_reduce(t)
            after = "the next all_reduce did not raise"
        except RuntimeError as e2:
            after = f"next: {e2}"
        report = os.path.join(out_dir, f"rank{rank}")
        with open(report + ".tmp", "w") as f:
            f.write(f"{seen!r}\n{e}\n{after}\n")
        os.replace(report + ".tmp", report)  # whole, once it is there
        os._exit(0)
elif mode == "exit_in_callback":
    def slow(fut):
        time.sleep(1.0)  # takes the GIL back when it ends: late, while Python finalizes
        with open(os.path.join(out_dir, f"callback{rank}"), "w") as f:
            f.write(repr(fut.value()[0].tolist()))
        return fut.value()

    work = dist.all_reduce(torch.ones(3), async_op=True)
    work.get_future().then(slow)
    work.wait()
    if "uneven" in modes:
        # rank 1 runs out of data: it leaves (destroy_process_group) while rank 0 waits in
        # one more all_reduce, which must fail at once saying so (OUT_DIR/uneven0: the
        # seconds it waited, then the message)
        if rank == 1:
            time.sleep(0.5)
            dist.destroy_process_group()
            sys.exit(0)
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4))
            text = "no error"
        except RuntimeError as e:
            text = str(e)
        with open(os.path.join(out_dir, "uneven0"), "w") as f:
            f.write(f"{time.monotonic() - start:.2f}\n{text}")
    sys.exit(0)
elif mode == "resume":
    ckpt = os.path.join(out_dir, "ckpt.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    killed = os.path.join(out_dir, "killed")
    for step in range(start, 12):
        if rank == victim and step == 5 and not os.path.exists(killed):
            open(killed, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        step_once(step)
        dist.barrier()  # every rank has finished the step: rank 0's checkpoint is complete
        if rank == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    with open(os.path.join(out_dir, f"done{rank}"), "w") as f:
        f.write(f"{start} {attempt} {checksum!r}\n")
dist.destroy_process_group()
