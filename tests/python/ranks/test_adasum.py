"""hvd.Adasum from horovod.torch, run by every rank of a horovodrun job: the allreduce forms
against a float64 reference of the tree written here (rank q + i folded into rank i, q the
largest power of two not above the size, then pairs at distance 1, 2, 4, ...), and
DistributedOptimizer(op=hvd.Adasum) against a single-process simulation of every rank's update.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import horovod.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def horovod_init():
    hvd.init()
    yield


def adasum_pair(a, b):
    ab, aa, bb = float(np.dot(a, b)), float(np.dot(a, a)), float(np.dot(b, b))
    tiny = math.sqrt(np.finfo(np.float64).tiny)
    ca = 1 - ab / (2 * aa) if aa >= tiny else 1.0
    cb = 1 - ab / (2 * bb) if bb >= tiny else 1.0
    return ca * a + cb * b


def adasum_tree(vectors):
    v = [(x.double().numpy() if torch.is_tensor(x) else np.asarray(x, dtype=np.float64))
         .ravel().copy() for x in vectors]
    q = 1
    while 2 * q <= len(v):
        q *= 2
    for i in range(len(v) - q):
        v[i] = adasum_pair(v[i], v[q + i])
    d = 1
    while d < q:
        for i in range(0, q, 2 * d):
            v[i] = adasum_pair(v[i], v[i + d])
        d *= 2
    return v[0]


def rank_tensor(rank, shape, seed, dtype):
    # k / 64 for |k| <= 64: exact in every floating dtype
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return (torch.randint(-64, 65, shape, generator=g).double() / 64).to(dtype)


TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 3e-6, torch.float64: 1e-12}


def check(got, want, dtype):
    want = torch.from_numpy(want).reshape(got.shape)
    scale = max(want.abs().max().item(), 1e-30) if want.numel() else 1.0
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    assert err <= TOL[dtype] * scale, f"{dtype}: error {err} > {TOL[dtype] * scale}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (1021,), (33, 65)])
def test_allreduce_adasum(dtype, shape):
    seed = len(shape) * 100 + shape[0]
    t = rank_tensor(hvd.rank(), shape, seed, dtype)
    want = adasum_tree([rank_tensor(r, shape, seed, dtype) for r in range(hvd.size())])
    out = hvd.allreduce(t, op=hvd.Adasum, name=f"adasum.{dtype}.{shape}")
    assert out.dtype == dtype and out.shape == t.shape
    check(out, want, dtype)
    # in place, async, with scale factors: Adasum(c a, c b) = c Adasum(a, b)
    h = hvd.allreduce_async_(t, op=hvd.Adasum, prescale_factor=0.5, postscale_factor=4.0)
    assert hvd.synchronize(h) is t
    check(t, want * 2.0, dtype)


def test_grouped_allreduce_adasum_is_per_tensor():
    # fused into one buffer, each tensor still gets its own coefficients
    shapes = [(5,), (300,), (2, 17), (1,)]
    ts = [rank_tensor(hvd.rank(), s, 7 + i, torch.float32) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Adasum, name="adasum.grouped")
    for i, (s, out) in enumerate(zip(shapes, outs)):
        want = adasum_tree([rank_tensor(r, s, 7 + i, torch.float32) for r in range(hvd.size())])
        check(out, want, torch.float32)


def test_adasum_of_equal_updates_is_that_update():
    t = torch.linspace(-1, 1, 50, dtype=torch.float64)
    assert torch.allclose(hvd.allreduce(t, op=hvd.Adasum), t, rtol=0, atol=1e-12)


def test_adasum_refuses_integers_naming_the_dtype():
    with pytest.raises(Exception, match="adasum is not supported for int32"):
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum)
    # the job goes on
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2


def test_adasum_on_a_process_set():
    if hvd.size() < 3:
        pytest.skip("a set smaller than the world needs 3 ranks (2 in it)")
    ranks = list(range(hvd.size() - 1))
    ps = hvd.ProcessSet(ranks)
    hvd.shutdown()
    hvd.init(process_sets=[ps])
    try:
        if hvd.rank() in ranks:
            t = rank_tensor(hvd.rank(), (129,), 11, torch.float64)
            out = hvd.allreduce(t, op=hvd.Adasum, process_set=ps)
            check(out, adasum_tree([rank_tensor(r, (129,), 11, torch.float64) for r in ranks]),
                  torch.float64)
    finally:
        # every rank, members or not, waits for the set's collective before any shuts down:
        # a rank's shutdown fails the others' collectives
        hvd.barrier()
        hvd.shutdown()
        hvd.init()


def make_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)


@pytest.mark.parametrize("passes", [1, 2])
def test_distributed_optimizer_adasum_against_simulation(passes):
    """Each rank steps its own optimizer (SGD with momentum: state of its own) from the shared
    parameters; the parameters then move by the Adasum of the ranks' changes, tensor by
    tensor. The simulation does just that for every rank in one process."""
    size, lr = hvd.size(), 0.1
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=passes)
    sims = [make_model() for _ in range(size)]
    sim_opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) for m in sims]
    for step in range(3):
        opt.zero_grad()
        for k in range(passes):
            x, y = batch(hvd.rank(), step * passes + k)
            F.cross_entropy(model(x), y).backward()
        opt.step()
        starts = [p.detach().clone() for p in sims[0].parameters()]
        changes = []
        for r, (m, o) in enumerate(zip(sims, sim_opts)):
            o.zero_grad()
            for k in range(passes):
                x, y = batch(r, step * passes + k)
                F.cross_entropy(m(x), y).backward()
            o.step()
            changes.append([(p.detach() - s).double().numpy() for p, s in zip(m.parameters(),
                                                                              starts)])
        for i, s in enumerate(starts):
            new = s.double() + torch.from_numpy(
                adasum_tree([c[i] for c in changes]).reshape(s.shape))
            for m in sims:
                list(m.parameters())[i].data.copy_(new)
        for p, q in zip(model.parameters(), sims[0].parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (step, p, q)


def test_adasum_optimizer_refuses_skip_synchronize():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    with pytest.raises(AssertionError, match="not supported when using Adasum"):
        with opt.skip_synchronize():
            pass
