"""horovod.torch training helpers, run by every rank of a horovodrun job: DistributedOptimizer
against a single-process reference on the global batch, backward_passes_per_step, fp16
compression, broadcast of parameters, optimizer state and objects, SyncBatchNorm against
BatchNorm on the gathered batch, basics.
"""
import copy
import os

import pytest
import torch
import torch.nn.functional as F

import horovod
import horovod.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def horovod_init():
    hvd.init()
    yield


def make_model(seed=1):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def global_batch(step, per_rank=4):
    g = torch.Generator().manual_seed(100 + step)
    n = per_rank * hvd.size()
    x = torch.randn(n, 6, generator=g, dtype=torch.float64).float()
    y = torch.randint(0, 3, (n,), generator=g)
    return x, y


def my_share(x, y, per_rank=4):
    lo = hvd.rank() * per_rank
    return x[lo:lo + per_rank], y[lo:lo + per_rank]


def params_close(a, b, tol=1e-5):
    return all(torch.allclose(p, q, rtol=tol, atol=tol)
               for p, q in zip(a.parameters(), b.parameters()))


def test_basics():
    assert hvd.is_initialized()
    assert 0 <= hvd.rank() < hvd.size()
    assert hvd.size() == int(os.environ.get("HOROVOD_SIZE", "1"))
    assert hvd.local_size() * hvd.cross_size() == hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.is_homogeneous()
    assert hvd.gloo_built() and hvd.gloo_enabled()
    assert not hvd.mpi_built() and not hvd.mpi_enabled()
    assert not hvd.cuda_built() and not hvd.rocm_built()
    assert not hvd.nccl_built() and not hvd.ddl_built() and not hvd.ccl_built()
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert horovod.__version__


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_distributed_optimizer_matches_single_process(opt_name):
    ref = make_model()
    model = make_model()
    make_opt = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    }[opt_name]
    ref_opt = make_opt(ref.parameters())
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(5):
        x, y = global_batch(step)
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_opt.step()
        xs, ys = my_share(x, y)
        opt.zero_grad()
        F.cross_entropy(model(xs), ys).backward()
        opt.step()
    assert params_close(model, ref), "the global-batch reference and the distributed model differ"


def test_backward_passes_per_step():
    ref = make_model()
    model = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    for step in range(3):
        ref_opt.zero_grad()
        opt.zero_grad()
        for micro in range(2):
            x, y = global_batch(10 * step + micro)
            (F.cross_entropy(ref(x), y) / 2).backward()
            xs, ys = my_share(x, y)
            (F.cross_entropy(model(xs), ys) / 2).backward()
        ref_opt.step()
        opt.step()
    assert params_close(model, ref)


def test_fp16_compression_and_sum_op():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16, op=hvd.Sum)
    for p in model.parameters():
        p.grad = None
    x, y = global_batch(0)
    xs, ys = my_share(x, y)
    F.cross_entropy(model(xs), ys).backward()
    local = [p.grad.clone() for p in model.parameters()]
    opt.synchronize()
    summed = [hvd.allreduce(g, op=hvd.Sum) for g in local]
    for p, want in zip(model.parameters(), summed):
        assert p.grad.dtype == torch.float32
        assert torch.allclose(p.grad, want, rtol=1e-2, atol=1e-2)
    with opt.skip_synchronize():
        opt.step()


def test_zero_grad_between_backward_and_step_is_refused():
    if hvd.size() == 1 and os.environ.get("HOROVOD_ELASTIC") != "1":
        pytest.skip("Horovod registers no hooks on a job of one")
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(0)
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(AssertionError):
        opt.zero_grad()
    opt.step()


def test_compression_round_trip():
    t = torch.tensor([1.5, -2.25, 3.0])
    c, ctx = hvd.Compression.fp16.compress(t)
    assert c.dtype == torch.float16
    assert torch.equal(hvd.Compression.fp16.decompress(c, ctx), t)
    c, ctx = hvd.Compression.none.compress(t)
    assert c is t


def test_broadcast_parameters_and_optimizer_state():
    model = make_model(seed=hvd.rank() + 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1))
    x, y = global_batch(0)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    state = torch.cat([opt.state[p]["exp_avg"].flatten() for p in model.parameters()])
    for t in (flat, state):
        gathered = hvd.allgather(t.unsqueeze(0))
        assert all(torch.equal(gathered[0], row) for row in gathered)


def test_broadcast_optimizer_state_sgd_momentum_and_fresh_state():
    model = make_model(seed=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5 if hvd.rank() == 0 else 0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(opt, root_rank=0)  # creates the empty state first
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.9)


def test_broadcast_object_and_allgather_object():
    obj = {"rank": hvd.rank(), "list": list(range(hvd.rank() + 1))}
    got = hvd.broadcast_object(obj, root_rank=hvd.size() - 1)
    assert got == {"rank": hvd.size() - 1, "list": list(range(hvd.size()))}
    everything = hvd.allgather_object(obj)
    assert everything == [{"rank": r, "list": list(range(r + 1))} for r in range(hvd.size())]


def test_sync_batch_norm_matches_batch_norm_on_gathered_batch():
    torch.manual_seed(5)
    full = torch.randn(3 * hvd.size(), 4, 5, dtype=torch.float32)
    lo = 3 * hvd.rank()
    mine = full[lo:lo + 3].clone().requires_grad_(True)
    ref_in = full.clone().requires_grad_(True)
    sbn = hvd.SyncBatchNorm(4)
    bn = torch.nn.BatchNorm1d(4)
    sbn.train()
    bn.train()
    out = sbn(mine)
    ref = bn(ref_in)
    assert torch.allclose(out, ref[lo:lo + 3], atol=1e-5)
    assert torch.allclose(sbn.running_mean, bn.running_mean, atol=1e-5)
    assert torch.allclose(sbn.running_var, bn.running_var, atol=1e-5)
    weight = torch.arange(3 * hvd.size() * 20, dtype=torch.float32).reshape(-1, 4, 5) / 100
    (out * weight[lo:lo + 3]).sum().backward()
    (ref * weight).sum().backward()
    assert torch.allclose(mine.grad, ref_in.grad[lo:lo + 3], atol=1e-4)
    # the affine parameters' gradients are this rank's part (DistributedOptimizer sums them)
    assert torch.allclose(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), bn.weight.grad, atol=1e-4)
    assert torch.allclose(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), bn.bias.grad, atol=1e-4)


def test_timeline_start_stop(tmp_path):
    # rank 0 writes it; every rank may call
    path = os.path.join(os.environ.get("HVD_TEST_TMP", str(tmp_path)), "timeline.json")
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(4), name="timeline.probe")
    hvd.stop_timeline()
    if hvd.rank() == 0:
        with open(path) as f:
            text = f.read()
        assert "timeline.probe" in text and "NEGOTIATE_ALLREDUCE" in text
