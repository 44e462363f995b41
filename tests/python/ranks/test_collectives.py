"""horovod.torch collectives, run by every rank of a horovodrun job (np 1, 2 and 3 in CI).

Every rank runs the same tests in the same order: each test is a sequence of collectives.
Expected values are computed locally from what every rank contributes (rank-dependent
inputs), so a wrong result on any rank fails that rank, and horovodrun ends the job.
"""
import itertools
import threading
import time

import pytest
import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError

# dtypes torch and libhvd share
ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64, torch.bool]
NUMERIC = [d for d in ALL_DTYPES if d is not torch.bool]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SHAPES = [(), (0,), (1,), (17,), (3, 5), (2, 3, 4)]


@pytest.fixture(scope="module", autouse=True)
def horovod():
    hvd.init()
    yield
    # shut down by atexit, as in users' scripts


def rank_tensor(shape, dtype, rank, scale=1):
    """A tensor whose values depend on the rank and fit every dtype."""
    n = 1
    for d in shape:
        n *= d
    base = (torch.arange(n, dtype=torch.float64) % 7 + rank * scale) % 11
    t = base.reshape(shape)
    if dtype is torch.bool:
        return (t.to(torch.int64) % 2).to(torch.bool)
    return t.to(dtype)


def everyone(shape, dtype, scale=1):
    return [rank_tensor(shape, dtype, r, scale) for r in range(hvd.size())]


def reference_reduce(tensors, op):
    acc = torch.stack([t.to(torch.float64) for t in tensors])
    if op == hvd.Sum:
        return acc.sum(0)
    if op == hvd.Average:
        return acc.sum(0) / len(tensors)
    if op == hvd.Min:
        return acc.min(0).values
    if op == hvd.Max:
        return acc.max(0).values
    if op == hvd.Product:
        return acc.prod(0)
    raise AssertionError(op)


def close(got, want, dtype):
    got = got.to(torch.float64)
    if dtype in (torch.float16, torch.bfloat16):
        tol = 2e-2 if dtype is torch.float16 else 1e-1
        return torch.allclose(got, want, rtol=tol, atol=tol)
    if dtype in (torch.float32, torch.float64):
        return torch.allclose(got, want, rtol=1e-6, atol=1e-6)
    return torch.equal(got, want)


def int_average(tensors, dtype):
    s = torch.stack([t.to(torch.int64) for t in tensors]).sum(0)
    return torch.div(s, len(tensors), rounding_mode="trunc").to(torch.float64)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", SHAPES)
def test_allreduce_sum_every_dtype_and_shape(dtype, shape):
    t = rank_tensor(shape, dtype, hvd.rank())
    out = hvd.allreduce(t, op=hvd.Sum, name=f"sum.{dtype}.{shape}")
    assert out.dtype == dtype and out.shape == t.shape
    want = reference_reduce(everyone(shape, dtype), hvd.Sum)
    if dtype in (torch.uint8, torch.int8, torch.int16):
        bits = {torch.uint8: 8, torch.int8: 8, torch.int16: 16}[dtype]
        want = torch.tensor(want.to(torch.int64).numpy() % (1 << bits)).to(dtype).to(torch.float64)
    assert close(out, want, dtype), (out, want)
    assert torch.equal(t, rank_tensor(shape, dtype, hvd.rank())), "input changed"


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64,
                                   torch.float16, torch.bfloat16])
def test_allreduce_every_op(op, dtype):
    shape = (4, 3)
    t = rank_tensor(shape, dtype, hvd.rank())
    out = hvd.allreduce(t, op=op)
    if op == hvd.Average and not dtype.is_floating_point:
        want = int_average(everyone(shape, dtype), dtype)
    else:
        want = reference_reduce(everyone(shape, dtype), op)
    assert close(out, want, dtype), (op, out, want)


def test_allreduce_default_op_is_average():
    t = torch.full((5,), float(hvd.rank()))
    out = hvd.allreduce(t)
    assert torch.allclose(out, torch.full((5,), (hvd.size() - 1) / 2))


def test_allreduce_bool_is_logical():
    t = torch.tensor([hvd.rank() == 0, True, False])
    out = hvd.allreduce(t, op=hvd.Sum)
    assert out.dtype == torch.bool
    assert out.tolist() == [True, True, False]
    out = hvd.allreduce(t, op=hvd.Min)
    assert out.tolist() == [hvd.size() == 1, True, False]


def test_allreduce_in_place_and_async_in_place():
    t = torch.ones(10) * (hvd.rank() + 1)
    same = hvd.allreduce_(t, op=hvd.Sum)
    assert same is t
    total = hvd.size() * (hvd.size() + 1) / 2
    assert torch.allclose(t, torch.full((10,), total))
    u = torch.ones(3) * hvd.rank()
    h = hvd.allreduce_async_(u, op=hvd.Max)
    assert hvd.synchronize(h) is u
    assert u.tolist() == [hvd.size() - 1] * 3


def test_allreduce_non_contiguous():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) * (hvd.rank() + 1)
    view = base[:, ::2]
    assert not view.is_contiguous()
    out = hvd.allreduce(view, op=hvd.Sum)
    scale = hvd.size() * (hvd.size() + 1) / 2
    assert torch.allclose(out, torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2] * scale)
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.allclose(base[:, ::2], out), "in-place result not written back to the view"
    assert torch.allclose(base[:, 1::2],
                          torch.arange(24.).reshape(4, 6)[:, 1::2] * (hvd.rank() + 1))


def test_allreduce_scale_factors():
    t = torch.ones(6, dtype=torch.float64)
    out = hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    assert torch.allclose(out, torch.full((6,), 2.0 * hvd.size() * 0.25, dtype=torch.float64))
    out = hvd.allreduce(t, op=hvd.Average, prescale_factor=3.0)
    assert torch.allclose(out, torch.full((6,), 3.0, dtype=torch.float64))


def test_allreduce_average_and_op_conflict():
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum)


def test_async_waits_out_of_order():
    ts = [torch.full((100 + i,), float(hvd.rank() + i)) for i in range(8)]
    handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f"ooo.{i}") for i, t in enumerate(ts)]
    order = list(range(8))
    order.reverse()
    order = order[hvd.rank() % 3:] + order[:hvd.rank() % 3]
    for i in order:
        out = hvd.synchronize(handles[i])
        want = sum(r + i for r in range(hvd.size()))
        assert torch.allclose(out, torch.full((100 + i,), float(want)))


def test_poll_then_synchronize():
    h = hvd.allreduce_async(torch.ones(4), name="poll.me")
    while not hvd.poll(h):
        pass
    assert torch.allclose(hvd.synchronize(h), torch.ones(4))


def test_named_unnamed_and_unwaited_mixed_with_a_thread():
    """Loops of named, unnamed and only-polled allreduces on the main thread while another
    thread runs its own named ones: the callers run the cycles themselves, the background
    thread moves what nobody waits for, and every result is right."""
    r, n = hvd.rank(), hvd.size()
    ranks_sum = sum(range(n))
    errors = []

    def worker():
        try:
            for i in range(150):
                out = hvd.allreduce(torch.full((3,), float(r + i)), op=hvd.Sum, name="mix.thread")
                assert torch.equal(out, torch.full((3,), float(ranks_sum + n * i))), (i, out)
        except BaseException as e:  # noqa: B902 (reported by the main thread)
            errors.append(e)

    th = threading.Thread(target=worker)
    th.start()
    for i in range(300):
        t = torch.tensor([float(r + i)])
        if i % 3 == 0:
            out = hvd.allreduce(t, op=hvd.Sum)  # unnamed: numbered alike on every rank
        elif i % 3 == 1:
            out = hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum, name="mix.named"))
        else:
            h = hvd.allreduce_async(t, op=hvd.Sum, name="mix.polled")
            deadline = time.monotonic() + 30
            while not hvd.poll(h):
                assert time.monotonic() < deadline, f"mix.polled {i} not done after 30 s"
                time.sleep(0.0002)
            out = hvd.synchronize(h)
        assert out.item() == float(ranks_sum + n * i), (i, out)
    th.join(60)
    assert not th.is_alive(), "the other thread's allreduces did not finish"
    assert not errors, errors


def test_enqueue_order_differs_between_ranks():
    names = [f"perm.{i}" for i in range(6)]
    perm = list(itertools.permutations(range(6)))[hvd.rank() * 37 % 720]
    handles = {}
    for i in perm:
        handles[i] = hvd.allreduce_async(torch.full((3,), float(i)), name=names[i], op=hvd.Sum)
    for i in range(6):
        assert torch.allclose(hvd.synchronize(handles[i]), torch.full((3,), float(i * hvd.size())))


@pytest.mark.parametrize("inplace", [False, True])
def test_grouped_allreduce(inplace):
    ts = [torch.full((i + 1, 2), float(hvd.rank())) for i in range(5)]
    if inplace:
        outs = hvd.grouped_allreduce_(ts, op=hvd.Sum)
        assert all(o is t for o, t in zip(outs, ts))
    else:
        outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    want = float(sum(range(hvd.size())))
    for i, o in enumerate(outs):
        assert o.shape == (i + 1, 2)
        assert torch.allclose(o, torch.full((i + 1, 2), want))
    hs = hvd.grouped_allreduce_async([torch.ones(3), torch.ones(4)], op=hvd.Average)
    res = hvd.synchronize(hs)
    assert [r.tolist() for r in res] == [[1.0] * 3, [1.0] * 4]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allgather_variable_first_dimension(dtype):
    rows = lambda r: r + 1
    t = rank_tensor((rows(hvd.rank()), 3), dtype, hvd.rank(), scale=3)
    out = hvd.allgather(t, name=f"gather.{dtype}")
    want = torch.cat([rank_tensor((rows(r), 3), dtype, r, scale=3) for r in range(hvd.size())])
    assert out.dtype == dtype
    assert out.shape == want.shape
    assert torch.equal(out, want)


def test_allgather_empty_and_one_rank_empty():
    t = torch.ones(0, 4)
    assert hvd.allgather(t).shape == (0, 4)
    t = torch.ones(1 if hvd.rank() == 0 else 0, 2)
    out = hvd.allgather(t)
    assert out.shape == (1, 2)


def test_allgather_async_and_grouped():
    h = hvd.allgather_async(torch.tensor([hvd.rank()]), name="ag.async")
    assert hvd.synchronize(h).tolist() == list(range(hvd.size()))
    outs = hvd.grouped_allgather([torch.tensor([hvd.rank()]), torch.tensor([[hvd.rank(), 1]])])
    assert outs[0].tolist() == list(range(hvd.size()))
    assert outs[1].tolist() == [[r, 1] for r in range(hvd.size())]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_broadcast_every_dtype(dtype):
    root = hvd.size() - 1
    t = rank_tensor((3, 4), dtype, hvd.rank())
    out = hvd.broadcast(t, root_rank=root, name=f"bcast.{dtype}")
    assert torch.equal(out, rank_tensor((3, 4), dtype, root))
    assert torch.equal(t, rank_tensor((3, 4), dtype, hvd.rank())), "input changed"


def test_broadcast_in_place_and_async():
    t = torch.full((5,), float(hvd.rank()))
    assert hvd.broadcast_(t, 0) is t
    assert t.tolist() == [0.0] * 5
    u = torch.full((2, 2), float(hvd.rank()))
    h = hvd.broadcast_async_(u, root_rank=hvd.size() - 1)
    assert hvd.synchronize(h) is u
    assert u.tolist() == [[float(hvd.size() - 1)] * 2] * 2
    h = hvd.broadcast_async(torch.tensor([hvd.rank()]), root_rank=0)
    assert hvd.synchronize(h).tolist() == [0]


def test_alltoall_even_and_with_splits():
    n = hvd.size()
    t = torch.arange(2 * n).reshape(2 * n, 1) + 100 * hvd.rank()
    out = hvd.alltoall(t)
    want = torch.cat([torch.arange(2 * hvd.rank(), 2 * hvd.rank() + 2).reshape(2, 1) + 100 * r
                      for r in range(n)])
    assert torch.equal(out, want)
    # rank r sends r + j + 1 rows to rank j
    splits = torch.tensor([hvd.rank() + j + 1 for j in range(n)], dtype=torch.int32)
    t = torch.full((int(splits.sum()), 2), float(hvd.rank()))
    out, received = hvd.alltoall(t, splits=splits)
    assert received.tolist() == [r + hvd.rank() + 1 for r in range(n)]
    want = torch.cat([torch.full((r + hvd.rank() + 1, 2), float(r)) for r in range(n)])
    assert torch.equal(out, want)


def test_alltoall_argument_errors():
    if hvd.size() > 1:
        with pytest.raises(ValueError):
            hvd.alltoall(torch.ones(hvd.size() + 1))  # not an even multiple
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(4), splits=torch.tensor([5] * hvd.size(), dtype=torch.int32))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
@pytest.mark.parametrize("rows", [1, 5, 7])
def test_reducescatter(op, rows):
    n, r = hvd.size(), hvd.rank()
    t = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (r + 1)
    out = hvd.reducescatter(t, op=op)
    mine = rows // n + (1 if r < rows % n else 0)
    start = sum(rows // n + (1 if q < rows % n else 0) for q in range(r))
    total = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (n * (n + 1) / 2)
    if op == hvd.Average:
        total = total / n
    assert out.shape == (mine, 2)
    assert torch.allclose(out, total[start:start + mine])


def test_grouped_reducescatter():
    n = hvd.size()
    ts = [torch.ones(2 * n, 3), torch.ones(n)]
    outs = hvd.grouped_reducescatter(ts, op=hvd.Sum)
    assert outs[0].shape == (2, 3) and torch.allclose(outs[0], torch.full((2, 3), float(n)))
    assert outs[1].shape == (1,) and torch.allclose(outs[1], torch.full((1,), float(n)))


def test_barrier_and_join():
    hvd.barrier()
    # a rank that joins last is named alike on every rank
    last = hvd.join()
    assert 0 <= last < hvd.size()
    everyone_saw = hvd.allgather(torch.tensor([last]))
    assert everyone_saw.tolist() == [last] * hvd.size()


def test_join_with_uneven_batches():
    # rank r has r + 1 batches; after its last, it joins and contributes zeros
    steps = hvd.rank() + 1
    for step in range(steps):
        out = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="uneven")
        contributing = sum(1 for r in range(hvd.size()) if r + 1 > step)
        assert torch.allclose(out, torch.full((4,), float(contributing)))
    last = hvd.join()
    assert last == hvd.size() - 1


def test_barrier_waits_for_the_last_rank():
    # rank 0 arrives 0.3 s late: nobody may leave before it came
    start = time.monotonic()
    if hvd.rank() == 0:
        time.sleep(0.3)
    hvd.barrier()
    assert time.monotonic() - start >= 0.29


@pytest.mark.parametrize("kind", ["allgather", "broadcast", "alltoall", "reducescatter"])
def test_join_refuses_what_zeros_cannot_stand_in_for(kind):
    """Every rank in turn joins first; the others' unnamed operation fails with Horovod's
    message instead of waiting (their unnamed operations are numbered differently by then,
    so they could never be matched), then they join too and the job goes on."""
    n = hvd.size()
    calls = {
        "allgather": lambda: hvd.allgather(torch.ones(2, 3)),
        "broadcast": lambda: hvd.broadcast(torch.ones(3), 0),
        "alltoall": lambda: hvd.alltoall(torch.ones(2 * n, 3)),
        "reducescatter": lambda: hvd.reducescatter(torch.ones(2 * n, 3)),
    }
    for first in range(n):
        if hvd.rank() != first:
            with pytest.raises(hvd.HorovodInternalError,
                               match=f"{kind.capitalize()} is not supported with Join"):
                calls[kind]()
        assert hvd.join() != -1 or n == 1
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"after_join_{kind}").item() == n


def test_unsupported_dtype_is_refused():
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(3, dtype=torch.complex64))


def test_tensors_off_the_cpu_and_non_tensors_are_refused_by_name():
    meta = torch.empty(3, device="meta")  # a device that is not the CPU, on any build
    for call in (hvd.allreduce, hvd.allreduce_, hvd.allreduce_async):
        with pytest.raises(ValueError, match="on meta"):
            call(meta, name="off.cpu")
        with pytest.raises(TypeError, match="list"):
            call([1.0, 2.0], name="not.a.tensor")
    # nothing was enqueued: the names are free, and the job goes on
    assert torch.allclose(hvd.allreduce(torch.ones(2), name="off.cpu"), torch.ones(2))


def test_synchronize_twice_and_unknown_handles_return_none():
    h = hvd.allreduce_async(torch.ones(2), name="sync.twice")
    assert torch.allclose(hvd.synchronize(h), torch.ones(2))
    assert hvd.synchronize(h) is None
    assert hvd.synchronize(10 ** 9) is None


def test_duplicate_name_in_flight_is_refused():
    if hvd.size() == 1:
        pytest.skip("alone, the first operation may complete before the second enqueue")
    # rank 0 enqueues "dup" while the others wait in the barrier, so it cannot complete yet
    if hvd.rank() == 0:
        h = hvd.allreduce_async(torch.ones(2), name="dup")
        with pytest.raises(ValueError, match="already being processed"):
            hvd.allreduce_async(torch.ones(2), name="dup")
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(torch.ones(2), name="dup")
    assert torch.allclose(hvd.synchronize(h), torch.ones(2))


def test_mismatched_shapes_raise_internal_error_on_every_rank():
    if hvd.size() == 1:
        pytest.skip("needs two ranks to disagree")
    t = torch.ones(3 + hvd.rank())
    with pytest.raises(HorovodInternalError, match="Mismatched ALLREDUCE tensor shapes"):
        hvd.allreduce(t, name="mismatch")
    # the job carries on
    assert torch.allclose(hvd.allreduce(torch.ones(2), name="after.mismatch"), torch.ones(2))


def test_autograd_allreduce():
    x = torch.ones(3, requires_grad=True)
    y = hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum)
    y.sum().backward()
    # d(sum over ranks of (r+1) x)/dx, seen through allreduce's backward (an allreduce of
    # the gradient with the same op): size * (rank + 1)
    assert torch.allclose(x.grad, torch.full((3,), float(hvd.size() * (hvd.rank() + 1))))


def test_allreduce_without_autograd():
    # no gradient to carry (no_grad, or an input that needs none): the same result, and an
    # output outside the graph, as through the autograd function
    n = hvd.size()
    x = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        y = hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum)
    assert not y.requires_grad and y.grad_fn is None
    assert torch.allclose(y, torch.full((3,), float(n * (n + 1) // 2)))
    z = hvd.allreduce(torch.full((2,), float(hvd.rank())))  # average, no grad needed
    assert not z.requires_grad and torch.allclose(z, torch.full((2,), (n - 1) / 2))
    w = hvd.allreduce(x * 2, op=hvd.Sum)  # needs one: through the autograd function
    assert w.requires_grad and w.grad_fn is not None


def test_autograd_allgather():
    x = torch.ones(hvd.rank() + 1, 2, requires_grad=True)
    y = hvd.allgather(x)
    (y * 2).sum().backward()
    # Horovod: the gradient is allreduced (averaged), then this rank's rows are taken
    assert x.grad.shape == x.shape
    assert torch.allclose(x.grad, torch.full(x.shape, 2.0))


def test_autograd_broadcast():
    x = torch.ones(4, requires_grad=True)
    y = hvd.broadcast(x, root_rank=0)
    (y * (hvd.rank() + 1)).sum().backward()
    # Horovod: the gradients are averaged over the ranks; only the root's input gets them
    want = (hvd.size() + 1) / 2 if hvd.rank() == 0 else 0.0
    assert torch.allclose(x.grad, torch.full((4,), want))


def test_autograd_alltoall_and_reducescatter():
    n = hvd.size()
    x = torch.ones(2 * n, requires_grad=True)
    y = hvd.alltoall(x)
    (y * 3).sum().backward()
    assert torch.allclose(x.grad, torch.full((2 * n,), 3.0))
    z = torch.ones(2 * n, 2, requires_grad=True)
    w = hvd.reducescatter(z, op=hvd.Sum)
    w.sum().backward()
    assert z.grad.shape == z.shape


def test_sparse_allreduce():
    i = torch.tensor([[hvd.rank()], [0]])
    v = torch.tensor([1.0])
    s = torch.sparse_coo_tensor(i, v, (hvd.size(), 1))
    h = hvd.sparse_allreduce_async(s, name="sparse", op=hvd.Sum)
    out = hvd.synchronize(h).to_dense()
    assert torch.allclose(out, torch.ones(hvd.size(), 1))
