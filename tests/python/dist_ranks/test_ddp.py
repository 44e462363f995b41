"""DistributedDataParallel and its features on the "hvd" backend, on every rank of the job
(tests/python/python.cmake runs this folder under torchrun and horovodrun). Each rank can make
every rank's batch, so each check compares DDP's result with the same training done here on
the whole batch, without any communication."""
import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import horovod.torch  # noqa: F401  (registers the backend)


def rank():
    return dist.get_rank()


def size():
    return dist.get_world_size()


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(8, 3)
        self.spare = nn.Linear(8, 3) if unused else None  # never used in forward

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def model(unused=False):
    torch.manual_seed(1234)  # the same start on every rank
    return Net(unused)


def batch(r, step, n=4):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(n, 6, generator=g), torch.randn(n, 3, generator=g)


def local_reference(steps, lr=0.1, unused=False, accumulate=1):
    """The same SGD on one process: each step's gradient is the mean over ranks of each rank's
    gradient (DDP averages), summed over `accumulate` micro-steps."""
    m = model(unused)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            for r in range(size()):
                x, y = batch(r, step * accumulate + micro)
                (nn.functional.mse_loss(m(x), y) / size()).backward()
        opt.step()
    return m


def train(ddp, steps, lr=0.1, accumulate=1):
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            x, y = batch(rank(), step * accumulate + micro)
            if micro < accumulate - 1:
                with ddp.no_sync():
                    nn.functional.mse_loss(ddp(x), y).backward()
            else:
                nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return ddp.module


def assert_close(a, b, tol=1e-5):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=tol, rtol=tol), (name, (p - q).abs().max())


@pytest.mark.parametrize("features", [
    {},
    {"gradient_as_bucket_view": True},
    {"static_graph": True},
    {"bucket_cap_mb": 0.0001},  # one bucket per parameter: several allreduces in flight
], ids=["plain", "bucket_view", "static_graph", "tiny_buckets"])
def test_ddp_matches_local_training(features):
    ddp = DDP(model(), **features)
    assert_close(train(ddp, 4), local_reference(4))


def test_find_unused_parameters():
    ddp = DDP(model(unused=True), find_unused_parameters=True)
    trained = train(ddp, 3)
    assert_close(trained, local_reference(3, unused=True))
    assert trained.spare.weight.grad is None or not trained.spare.weight.grad.any()


def test_no_sync_accumulates():
    ddp = DDP(model())
    assert_close(train(ddp, 2, accumulate=3), local_reference(2, accumulate=3))


@pytest.mark.parametrize("hook,tol", [
    (default_hooks.allreduce_hook, 1e-5),
    (default_hooks.fp16_compress_hook, 2e-2),
], ids=["allreduce", "fp16"])
def test_comm_hooks(hook, tol):
    ddp = DDP(model())
    ddp.register_comm_hook(dist.group.WORLD, hook)
    assert_close(train(ddp, 2), local_reference(2), tol)


def test_bf16_hook_is_torchs_cuda_only():
    # torch 1.13's DDP refuses bf16_compress_hook without CUDA, whatever the backend
    with pytest.raises(TypeError, match="CUDA"):
        DDP(model()).register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)


def test_powersgd_hook():
    ddp = DDP(model())
    # start_powerSGD_iter: the first steps are plain allreduces, exact; then rank-1 low-rank
    # approximations, whose error feedback keeps training moving: every rank must still agree
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    trained = train(ddp, 4)
    flat = torch.cat([p.detach().flatten() for p in trained.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size())]
    dist.all_gather(everyone, flat)
    for other in everyone:
        assert torch.equal(other, flat)
    assert torch.isfinite(flat).all()


def test_join_with_uneven_inputs():
    ddp = DDP(model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    steps = 2 + rank()  # rank r has 2 + r batches
    with ddp.join():
        for step in range(steps):
            opt.zero_grad()
            x, y = batch(rank(), step)
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
    # step s averages the gradients of the ranks that still had a batch, over all ranks
    # (the joined ones contribute zeros): the same here
    ref = model()
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2 + size() - 1):
        ropt.zero_grad()
        for r in range(size()):
            if step < 2 + r:
                x, y = batch(r, step)
                (nn.functional.mse_loss(ref(x), y) / size()).backward()
        ropt.step()
    if rank() == size() - 1:  # the rank that trained every step
        assert_close(ddp.module, ref)


def test_zero_redundancy_optimizer():
    m = model()
    ddp = DDP(m)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    for step in range(3):
        opt.zero_grad()
        x, y = batch(rank(), step)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    assert_close(m, local_reference(3))
    # the full optimizer state gathers on one rank
    opt.consolidate_state_dict(to=0)
    if rank() == 0:
        assert "state" in opt.state_dict()


def test_ddp_buffers_broadcast_from_rank0():
    class WithBuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("seen", torch.zeros(1))

        def forward(self, x):
            return self.lin(x)
    m = WithBuffer()
    m.seen.fill_(float(rank() + 5))
    with torch.no_grad():
        m.lin.weight.fill_(float(rank()))  # DDP starts every rank from rank 0's parameters
    ddp = DDP(m)
    ddp(torch.ones(1, 2)).sum().backward()
    assert m.seen.item() == 5.0
    assert torch.equal(m.lin.weight, torch.zeros(2, 2))
    copy.deepcopy(ddp.module.state_dict())
