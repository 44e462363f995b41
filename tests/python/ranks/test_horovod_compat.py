"""Behaviour that Horovod 0.28.1's own test/parallel/test_torch.py (or its source) expects of
horovod.torch and that hvd once did differently. Every rank of a horovodrun job runs these
tests (np 1, 2 and 3 in CI), the same collectives in the same order."""
import os

import pytest
import torch

import horovod.torch as hvd
from horovod.common import util
from horovod.torch import mpi_ops


@pytest.fixture(scope="module", autouse=True)
def horovod():
    hvd.init()
    yield


def test_mpi_ops_carries_the_basics():
    # Horovod's horovod.torch.mpi_ops defines init, shutdown, size, rank, ... itself
    assert mpi_ops.size() == hvd.size()
    assert mpi_ops.rank() == hvd.rank()
    assert mpi_ops.local_rank() == hvd.local_rank()
    assert mpi_ops.is_initialized()
    assert mpi_ops.init is hvd.init and mpi_ops.shutdown is hvd.shutdown
    assert mpi_ops.gloo_built() and not mpi_ops.mpi_enabled()


def test_sparse_allreduce_handle_is_called():
    # Horovod's sparse_allreduce_async returns a function: handle() waits for the result
    n = hvd.size()
    s = torch.sparse_coo_tensor(torch.tensor([[hvd.rank()], [1]]), torch.tensor([2.0]), (n, 3))
    handle = hvd.sparse_allreduce_async(s, name="compat.sparse", op=hvd.Average)
    assert callable(handle)
    out = handle()
    assert out.is_sparse
    expected = torch.zeros(n, 3)
    expected[:, 1] = 2.0 / n
    assert torch.allclose(out.to_dense(), expected)
    assert hvd.poll(handle)
    assert torch.allclose(hvd.synchronize(handle).to_dense(), expected)


def test_synchronize_of_a_finished_handle_returns_none():
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
    assert torch.allclose(hvd.synchronize(h), torch.full((2,), float(hvd.size())))
    assert hvd.synchronize(h) is None  # Horovod: a handle it does not know gives None


@pytest.mark.parametrize("op,per_rank", [(hvd.Sum, True), (hvd.Average, False)],
                         ids=["Sum", "Average"])
def test_reducescatter_gradient(op, per_rank):
    # Horovod: the output's gradient, times size() for Sum (unscaled for Average), gathered
    n = hvd.size()
    x = torch.ones(2 * n, 3, requires_grad=True)
    y = hvd.reducescatter(x, op=op)
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, torch.full((2 * n, 3), float(n if per_rank else 1)))


def test_reducescatter_gradient_scaled_by_pre_and_postscale():
    n = hvd.size()
    x = torch.ones(2 * n, dtype=torch.float64, requires_grad=True)
    y = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(y, torch.full((2,), 1.5 * n, dtype=torch.float64))
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, torch.full((2 * n,), 1.5 * n, dtype=torch.float64))


@pytest.mark.parametrize("op", [hvd.Adasum, hvd.Min, hvd.Max, hvd.Product],
                         ids=["Adasum", "Min", "Max", "Product"])
def test_reducescatter_rejects_other_ops_with_runtime_error(op):
    # Horovod's core fails the enqueue: a RuntimeError (its test catches RuntimeError)
    with pytest.raises(RuntimeError, match="only supports AVERAGE and SUM"):
        hvd.reducescatter(torch.ones(hvd.size() * 2), op=op)


def test_grouped_allgather_gradient():
    # as allgather's: the averaged gradient's rows that this rank contributed
    n, r = hvd.size(), hvd.rank()
    a = torch.ones(r + 1, 2, requires_grad=True)
    b = torch.ones(2 * (r + 1), requires_grad=True)
    outs = hvd.grouped_allgather([a, b])
    total = n * (n + 1) // 2
    assert outs[0].shape == (total, 2) and outs[1].shape == (2 * total,)
    # rank k sends gradient k + row index: averaged, the rows carry (n - 1) / 2 + row index
    ga = (torch.arange(total, dtype=torch.float32).unsqueeze(1) + r).expand(total, 2)
    gb = torch.arange(2 * total, dtype=torch.float32) + r
    torch.autograd.backward(outs, [ga.contiguous(), gb])
    start = r * (r + 1) // 2
    mean = (n - 1) / 2
    rows = torch.arange(start, start + r + 1, dtype=torch.float32)
    assert torch.allclose(a.grad, (rows + mean).unsqueeze(1).expand(r + 1, 2))
    assert torch.allclose(b.grad, torch.arange(2 * start, 2 * start + 2 * (r + 1),
                                               dtype=torch.float32) + mean)


@pytest.mark.parametrize("op,factor", [(hvd.Sum, None), (hvd.Average, 1)],
                         ids=["Sum", "Average"])
def test_grouped_reducescatter_gradient(op, factor):
    n = hvd.size()
    xs = [torch.ones(2 * n, requires_grad=True), torch.ones(n, 4, requires_grad=True)]
    outs = hvd.grouped_reducescatter(xs, op=op)
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    expected = float(n if factor is None else factor)
    for x in xs:
        assert torch.allclose(x.grad, torch.full_like(x, expected))


def test_sparse_as_dense_leaves_sparse_gradients_sparse():
    # Horovod reduces a dense copy and makes the result sparse again: SparseAdam still works
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=True)
    idx = torch.tensor([hvd.rank() % 10, 7])
    emb(idx).sum().backward()
    opt.synchronize()
    grad = emb.weight.grad
    assert grad.is_sparse
    expected = torch.zeros(10, 3)
    expected[7] = 1.0
    for k in range(hvd.size()):
        expected[k % 10] += 1.0 / hvd.size()
    assert torch.allclose(grad.to_dense(), expected)
    with opt.skip_synchronize():
        opt.step()  # SparseAdam refuses dense gradients


def test_util_env_leaves_a_variable_given_none():
    os.environ["HVD_COMPAT_ENV"] = "kept"
    try:
        with util.env(HVD_COMPAT_ENV=None, HVD_COMPAT_OTHER="1"):
            assert os.environ["HVD_COMPAT_ENV"] == "kept"
            assert os.environ["HVD_COMPAT_OTHER"] == "1"
        assert os.environ["HVD_COMPAT_ENV"] == "kept"
        assert "HVD_COMPAT_OTHER" not in os.environ
    finally:
        os.environ.pop("HVD_COMPAT_ENV", None)
