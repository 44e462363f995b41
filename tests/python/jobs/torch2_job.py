"""What torch 2 users run on the CPU with gloo, run by tests/python/test_torch2.py under torchrun
with a backend named on the command line:

    torch2_job.py BACKEND OUT_DIR MODE[,MODE...]

Each MODE runs in turn in one process group (a job's start-up costs more than most modes), and
writes to OUT_DIR/MODE (OUT_DIR below). monitored_barrier ends the job: it comes last.

MODE fsdp: FullyShardedDataParallel over a fixed MLP on fixed data (its flat parameter
  sharded): each rank's shard in OUT_DIR/shard<rank>.pt.
MODE fully_shard: the same with torch 2's per-parameter fully_shard (DTensor parameters).
MODE ddp_compile: DDP over a torch.compile'd model (torch's CPU compiler, inductor);
  OUT_DIR/weights.pt, and OUT_DIR/compiled holds what torch.compile ran (its backend).
MODE compile_ddp: torch.compile over DDP (dynamo traces DDP's forward, and DDPOptimizer
  splits the graph at its buckets; the aot_eager backend, so that no time goes to inductor,
  which ddp_compile covers): OUT_DIR/weights.pt. On hvd, then a mismatch of broadcast and
  all_reduce, which must raise on both ranks (OUT_DIR/mismatch<rank>: the error).
MODE dtensor: a 1-D device mesh and, at four ranks, a 2-D one: distribute_tensor, redistribute
  between Shard, Replicate and Partial, full_tensor, and a DTensor matmul; each result checked
  here against plain arithmetic (OUT_DIR/dtensor<rank>: the checks that ran).
MODE dcp: torch.distributed.checkpoint saves an FSDP model's and optimizer's sharded state to
  OUT_DIR/ckpt, a fresh model loads it, and both go on training for a step: OUT_DIR/weights.pt
  is the loaded model's (the saved one's must be equal, and is checked here).
MODE monitored_barrier: dist.monitored_barrier with every rank on time, then with every rank
  but 0 late: OUT_DIR/all_arrive<rank> and OUT_DIR/late<rank> hold "ok" or the error.

Equal weights on gloo and hvd are what the test asserts (both sum two ranks' values exactly).
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import horovod.torch  # noqa: F401  (registers the "hvd" backend)

backend, out_dir, modes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 48), nn.ReLU(),
                         nn.Linear(48, 5))


def batch(step):
    g = torch.Generator().manual_seed(step * 100 + rank)
    return torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g)


def train(model, opt, steps, first=0):
    for step in range(first, first + steps):
        opt.zero_grad()
        x, y = batch(step)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def save(state, out):
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in state.items()},
                   os.path.join(out, "weights.pt"))


def full_state(model):
    """The whole model's state dict, gathered (FSDP and fully_shard alike)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))


def run_fsdp(out):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    model = FSDP(mlp(), device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train(model, opt, 12)
    # Each rank's shard of the flat parameter: torch 2.13's FSDP crashes (SIGSEGV, on gloo
    # too) gathering a full state dict of a CPU model, in unflatten_as_params
    torch.save([p.detach().clone() for p in model.parameters()],
               os.path.join(out, f"shard{rank}.pt"))


def run_fully_shard(out):
    from torch.distributed.fsdp import fully_shard
    model = mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train(model, opt, 12)
    save(full_state(model), out)


def run_ddp_compile(out):
    seen = []

    def recording(gm, inputs):  # what ran is inductor's own code, compiled for this CPU
        from torch._inductor.compile_fx import compile_fx
        seen.append(len(gm.graph.nodes))
        return compile_fx(gm, inputs)
    model = mlp()
    ddp = nn.parallel.DistributedDataParallel(torch.compile(model, backend=recording))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    train(ddp, opt, 12)
    if rank == 0:
        with open(os.path.join(out, "compiled"), "w") as f:
            f.write(f"inductor graphs: {len(seen)}\n")
    save(model.state_dict(), out)


def run_compile_ddp(out):
    model = mlp()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    train(torch.compile(ddp, backend="aot_eager"), opt, 12)
    save(model.state_dict(), out)
    if backend == "hvd":
        check_broadcast_still_raises(out)


def check_broadcast_still_raises(out):
    """torch.compile runs the backend's broadcast eagerly, through a wrapper of dynamo's:
    torch.distributed.broadcast must still get a Work that raises the operation's error (a
    mismatch here), and the group go on. OUT_DIR/mismatch<rank>: the error."""
    t = torch.ones(4)
    try:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, 0)
        text = "no error"
    except RuntimeError as e:
        text = str(e)
    dist.all_reduce(t)
    with open(os.path.join(out, f"mismatch{rank}"), "w") as f:
        f.write(text)


def run_dtensor(out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    checks = []
    mesh = init_device_mesh("cpu", (size,))
    whole = torch.arange(size * 6 * 4, dtype=torch.float32).view(size * 6, 4)
    d = distribute_tensor(whole, mesh, [Shard(0)])
    assert torch.equal(d.to_local(), whole[rank * 6:(rank + 1) * 6]), "Shard(0) local part"
    assert torch.equal(d.full_tensor(), whole), "full_tensor (all_gather)"
    checks.append("shard/full_tensor")
    r = d.redistribute(mesh, [Replicate()])
    assert torch.equal(r.to_local(), whole), "Shard -> Replicate"
    checks.append("shard->replicate")
    s1 = r.redistribute(mesh, [Shard(1)])
    cols = 4 // size if 4 % size == 0 else None
    if cols:
        assert torch.equal(s1.to_local(), whole[:, rank * cols:(rank + 1) * cols])
    assert torch.equal(s1.full_tensor(), whole), "Replicate -> Shard(1)"
    checks.append("replicate->shard1")
    # Partial: every rank holds a summand; Replicate sums them (all_reduce), Shard(0)
    # scatters the sum (reduce_scatter)
    from torch.distributed.tensor import DTensor
    part = DTensor.from_local(torch.full((size * 2, 3), float(rank + 1)), mesh, [Partial()])
    total = float(sum(range(1, size + 1)))
    assert torch.equal(part.redistribute(mesh, [Replicate()]).to_local(),
                       torch.full((size * 2, 3), total)), "Partial -> Replicate"
    assert torch.equal(part.redistribute(mesh, [Shard(0)]).to_local(),
                       torch.full((2, 3), total)), "Partial -> Shard(0)"
    checks.append("partial->replicate/shard")
    # a sharded matmul: rows of A sharded, B replicated
    a = torch.randn(size * 3, 5, generator=torch.Generator().manual_seed(1))
    b = torch.randn(5, 2, generator=torch.Generator().manual_seed(2))
    prod = torch.mm(distribute_tensor(a, mesh, [Shard(0)]), distribute_tensor(b, mesh, [Replicate()]))
    assert torch.allclose(prod.full_tensor(), a @ b), "sharded matmul"
    checks.append("matmul")
    if size == 4:  # a 2x2 mesh: collectives within its rows and columns (new_group)
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m = torch.arange(16 * 4, dtype=torch.float32).view(16, 4)
        d2 = distribute_tensor(m, mesh2, [Shard(0), Shard(1)])
        assert tuple(d2.to_local().shape) == (8, 2)
        assert torch.equal(d2.full_tensor(), m), "2-D mesh full_tensor"
        rowsum = DTensor.from_local(torch.full((2,), float(rank)), mesh2,
                                    [Replicate(), Partial()])
        got = rowsum.redistribute(mesh2, [Replicate(), Replicate()]).to_local()
        tp = mesh2["tp"].get_local_rank()
        peers = [r for r in range(4) if r // 2 == rank // 2]
        assert torch.equal(got, torch.full((2,), float(sum(peers)))), (got, peers, tp)
        checks.append("mesh2d")
    with open(os.path.join(out, f"dtensor{rank}"), "w") as f:
        f.write(" ".join(checks) + "\n")


def run_dcp(out):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard

    def sharded():
        m = mlp()
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(m)
        return m, torch.optim.Adam(m.parameters(), lr=0.01)
    model, opt = sharded()
    train(model, opt, 5)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(out, "ckpt"))
    dist.barrier()
    fresh, fresh_opt = sharded()  # different weights, no optimizer state yet
    train(fresh, fresh_opt, 1, first=50)
    msd2, osd2 = get_state_dict(fresh, fresh_opt)
    state = {"model": msd2, "optim": osd2}
    dcp.load(state, checkpoint_id=os.path.join(out, "ckpt"))
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    # the loaded model is the saved one: the same weights, and the same after a step more
    for (n, p), (_, q) in zip(full_state(model).items(), full_state(fresh).items()):
        assert torch.equal(p, q), f"{n} differs after dcp.load"
    train(model, opt, 1, first=5)
    train(fresh, fresh_opt, 1, first=5)
    saved, loaded = full_state(model), full_state(fresh)
    for n in saved:
        assert torch.equal(saved[n], loaded[n]), f"{n} differs a step after dcp.load"
    save(loaded, out)


def run_monitored_barrier(out):
    def monitored(tag, wait_all=False):
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=2),
                                   wait_all_ranks=wait_all)
            result = "ok"
        except RuntimeError as e:  # (what torch or the backend says is the result)
            result = f"error: {e}"
        with open(os.path.join(out, f"{tag}{rank}"), "w") as f:
            f.write(result + "\n")
    monitored("all_arrive")
    dist.barrier()
    if rank != 0:  # the others come 4 s late: rank 0 names them once its 2 s are over
        time.sleep(4)
    monitored("late", wait_all=True)
    os._exit(0)  # (a failed monitored barrier leaves its messages unmatched: no shutdown)


for mode in modes:  # (one process group for all: a job's start-up is most of a mode's cost)
    run = globals().get(f"run_{mode}")
    if run is None:
        raise SystemExit(f"torch2_job.py: unknown mode {mode}")
    where = os.path.join(out_dir, mode)
    os.makedirs(where, exist_ok=True)
    run(where)
    dist.barrier()
dist.destroy_process_group()
