"""torch.distributed on the "hvd" backend, run by pytest on every rank of a job started by
torchrun or by horovodrun (tests/python/python.cmake), at np 1-4. Every rank runs the same
tests in the same order, as torch.distributed requires. Each result is checked against the
values every rank contributed, computed here on this rank alone."""
import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

import horovod.torch  # noqa: F401  (registers the backend)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.bool]
SHAPES = [(), (0,), (1,), (7, 3), (1 << 16,)]


def rank():
    return dist.get_rank()


def size():
    return dist.get_world_size()


def values(r, shape, dtype, small=False):
    """What rank r contributes: small integers every dtype holds exactly (1 or 2 for products,
    so that np 4 stays within int8)."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    v = (i % 2 + 1) if small else (i * 7 + r * 3) % 11
    if dtype == torch.bool:
        v = (i + r) % 3 == 0
    return v.to(dtype).reshape(shape)


def stack(shape, dtype, small=False):
    return torch.stack([values(r, shape, dtype, small).to(torch.float64) if dtype != torch.bool
                        else values(r, shape, dtype, small) for r in range(size())])


def reduce_local(op, shape, dtype):
    s = stack(shape, dtype, small=op == dist.ReduceOp.PRODUCT)
    if dtype == torch.bool:
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            return s.any(0)
        return s.all(0)
    out = {dist.ReduceOp.SUM: lambda: s.sum(0), dist.ReduceOp.PRODUCT: lambda: s.prod(0),
           dist.ReduceOp.MIN: lambda: s.min(0).values, dist.ReduceOp.MAX: lambda: s.max(0).values
           }[op]()
    return out.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
                                dist.ReduceOp.MAX], ids=["sum", "product", "min", "max"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_all_reduce(shape, op, dtype):
    t = values(rank(), shape, dtype, small=op == dist.ReduceOp.PRODUCT)
    dist.all_reduce(t, op=op)
    assert t.shape == torch.Size(shape)
    assert torch.equal(t, reduce_local(op, shape, dtype)), (t, reduce_local(op, shape, dtype))


def test_all_reduce_avg():
    t = values(rank(), (5, 3), torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, stack((5, 3), torch.float64).mean(0))


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("op", [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR],
                         ids=["band", "bor", "bxor"])
def test_all_reduce_bitwise(op, dtype):
    t = values(rank(), (9,), dtype)
    dist.all_reduce(t, op=op)
    fn = {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
          dist.ReduceOp.BXOR: torch.bitwise_xor}[op]
    want = values(0, (9,), dtype)
    for r in range(1, size()):
        want = fn(want, values(r, (9,), dtype))
    assert torch.equal(t, want)


def test_all_reduce_bitwise_refuses_floats():
    with pytest.raises(RuntimeError, match="bitwise"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)


def test_all_reduce_non_contiguous():
    base = values(rank(), (6, 4), torch.float32)
    t = base.t()  # a view whose rows are columns
    assert not t.is_contiguous()
    dist.all_reduce(t)
    assert torch.equal(base, stack((6, 4), torch.float32).sum(0).to(torch.float32))


def test_unsupported_dtype_is_named():
    # (torch 2 broadcasts complex tensors as their real views, so it takes uint16, which
    # torch 1.13 does not have, to reach the backend with a dtype it has no code for)
    dtype = getattr(torch, "uint16", torch.complex64)
    with pytest.raises(RuntimeError, match=str(dtype).split(".")[1]):
        dist.broadcast(torch.zeros(2, dtype=dtype), 0)


def test_complex_sum():
    # (torch sums complex tensors as their real views)
    t = torch.tensor([complex(rank(), 1)], dtype=torch.complex64)
    dist.all_reduce(t)
    assert t.item() == complex(sum(range(size())), size())


def test_all_reduce_coalesced():
    ts = [values(rank(), (3,), torch.float32), values(rank(), (2, 2), torch.float32)]
    with pytest.warns((UserWarning, FutureWarning)):  # (torch's deprecation notice)
        dist.all_reduce_coalesced(ts)
    assert torch.equal(ts[0], stack((3,), torch.float32).sum(0).float())
    assert torch.equal(ts[1], stack((2, 2), torch.float32).sum(0).float())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast(dtype):
    for root in range(size()):
        t = values(rank(), (4, 5), dtype)
        dist.broadcast(t, root)
        assert torch.equal(t, values(root, (4, 5), dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5)], ids=str)
def test_all_gather(shape, dtype):
    outs = [torch.empty(shape, dtype=dtype) for _ in range(size())]
    dist.all_gather(outs, values(rank(), shape, dtype))
    for r in range(size()):
        assert torch.equal(outs[r], values(r, shape, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool], ids=str)
def test_all_gather_into_tensor(dtype):
    out = torch.empty((size() * 3, 2), dtype=dtype)
    dist.all_gather_into_tensor(out, values(rank(), (3, 2), dtype))
    assert torch.equal(out, torch.cat([values(r, (3, 2), dtype) for r in range(size())]))
    out2 = torch.empty((size() * 3, 2), dtype=dtype)
    dist._all_gather_base(out2, values(rank(), (3, 2), dtype))
    assert torch.equal(out2, out)


def test_object_collectives():
    objs = [None] * size()
    dist.all_gather_object(objs, {"rank": rank(), "text": "x" * rank()})
    assert objs == [{"rank": r, "text": "x" * r} for r in range(size())]
    lst = [f"from root {rank()}", [rank()]]
    dist.broadcast_object_list(lst, src=size() - 1)
    assert lst == [f"from root {size() - 1}", [size() - 1]]
    got = [None] * size() if rank() == 0 else None
    dist.gather_object(("g", rank()), got, dst=0)
    if rank() == 0:
        assert got == [("g", r) for r in range(size())]
    out = [None]
    dist.scatter_object_list(out, [("s", r) for r in range(size())] if rank() == 0 else None,
                             src=0)
    assert out == [("s", rank())]


@pytest.mark.parametrize("op", [dist.ReduceOp.SUM, dist.ReduceOp.MAX], ids=["sum", "max"])
def test_reduce(op):
    for root in range(size()):
        t = values(rank(), (4, 3), torch.int32)
        dist.reduce(t, root, op=op)
        if rank() == root:
            assert torch.equal(t, reduce_local(op, (4, 3), torch.int32))
        else:  # the other ranks' tensors stay as they were
            assert torch.equal(t, values(rank(), (4, 3), torch.int32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.uint8], ids=str)
def test_gather_and_scatter(dtype):
    for root in range(size()):
        mine = values(rank(), (2, 3), dtype)
        lst = [torch.empty((2, 3), dtype=dtype) for _ in range(size())] if rank() == root else None
        dist.gather(mine, lst, dst=root)
        if rank() == root:
            for r in range(size()):
                assert torch.equal(lst[r], values(r, (2, 3), dtype))
        out = torch.empty((2, 3), dtype=dtype)
        pieces = [values(r + 10, (2, 3), dtype) for r in range(size())] if rank() == root else None
        dist.scatter(out, pieces, src=root)
        assert torch.equal(out, values(rank() + 10, (2, 3), dtype))


# (AVG of integers rounds toward zero: the float case checks AVG)
@pytest.mark.parametrize("op,dtype", [
    (dist.ReduceOp.SUM, torch.float32), (dist.ReduceOp.SUM, torch.int64),
    (dist.ReduceOp.MAX, torch.float32), (dist.ReduceOp.MAX, torch.int64),
    (dist.ReduceOp.AVG, torch.float32)], ids=["sum-f32", "sum-i64", "max-f32", "max-i64",
                                              "avg-f32"])
def test_reduce_scatter(op, dtype):
    n = size()
    ins = [values(rank() * n + j, (3,), dtype) for j in range(n)]
    out = torch.empty(3, dtype=dtype)
    dist.reduce_scatter(out, ins, op=op)
    per_rank = torch.stack([values(r * n + rank(), (3,), dtype).to(torch.float64)
                            for r in range(n)])
    want = {dist.ReduceOp.SUM: per_rank.sum(0), dist.ReduceOp.MAX: per_rank.max(0).values,
            dist.ReduceOp.AVG: per_rank.mean(0)}[op].to(dtype)
    assert torch.allclose(out.double(), want.double()), (out, want)
    flat = torch.cat(ins)
    out2 = torch.empty(3, dtype=dtype)
    dist.reduce_scatter_tensor(out2, flat, op=op)
    assert torch.equal(out2, out)


def test_all_to_all_lists_uneven():
    n = size()
    # rank r sends r + j + 1 elements to rank j
    ins = [torch.full((rank() + j + 1,), float(rank() * 100 + j)) for j in range(n)]
    outs = [torch.empty(r + rank() + 1) for r in range(n)]
    dist.all_to_all(outs, ins)
    for r in range(n):
        assert torch.equal(outs[r], torch.full((r + rank() + 1,), float(r * 100 + rank())))


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.bool], ids=str)
def test_all_to_all_single_even(dtype):
    n = size()
    inp = torch.cat([values(rank() * n + j, (2, 3), dtype) for j in range(n)])
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    assert torch.equal(out, torch.cat([values(r * n + rank(), (2, 3), dtype) for r in range(n)]))


def test_all_to_all_single_uneven():
    n = size()
    in_splits = [(rank() + j) % 3 for j in range(n)]  # rows to rank j (zero included)
    out_splits = [(r + rank()) % 3 for r in range(n)]
    inp = torch.cat([torch.full((in_splits[j], 2), float(rank() * 10 + j)) for j in range(n)])
    out = torch.empty((sum(out_splits), 2))
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[r], 2), float(r * 10 + rank())) for r in range(n)])
    assert torch.equal(out, want)


def test_barrier():
    dist.barrier()
    work = dist.barrier(async_op=True)
    work.wait()
    assert work.is_completed()


def test_async_work_and_future():
    t = values(rank(), (1000,), torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    # the future completes by itself: nobody waits for the work
    deadline = time.monotonic() + 30
    while not fut.done() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert fut.done()
    assert work.is_completed()
    assert torch.equal(fut.value()[0], stack((1000,), torch.float32).sum(0).float())
    work.wait()
    # many in flight at once
    ts = [values(rank() + k, (17,), torch.int64) for k in range(20)]
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in works:
        w.wait()
    for k, x in enumerate(ts):
        assert torch.equal(x, torch.stack([values(r + k, (17,), torch.int64)
                                           for r in range(size())]).sum(0))


def test_all_reduce_blocking_among_async():
    # blocking all_reduces (run to their end inside the call) among asynchronous ones of the
    # same signature: the first blocking one has the name of an asynchronous one still in
    # flight on every rank but the last, which comes late; every result right, in order
    if size() > 1 and rank() == size() - 1:
        time.sleep(0.5)
    works, tensors = [], []
    for k in range(40):
        t = values(rank() + k, (6,), torch.float32)
        tensors.append((k, t))
        if k >= 16 and k % 4 == 0:
            assert dist.all_reduce(t) is None
        else:
            works.append(dist.all_reduce(t, async_op=True))
    for w in works:
        w.wait()
    for k, t in tensors:
        assert torch.equal(t, torch.stack([values(r + k, (6,), torch.float32)
                                           for r in range(size())]).sum(0)), k


def test_work_outcome_in_every_order():
    # a Work waited first keeps its outcome: a future asked for afterwards is complete with it
    want = stack((5,), torch.float32).sum(0).float()
    t = values(rank(), (5,), torch.float32)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    fut = work.get_future()
    assert fut.done() and torch.equal(fut.value()[0], want)
    assert work.is_completed() and work.is_success() and work.exception() is None
    assert torch.equal(work.result()[0], want)
    work.wait()  # again: nothing more to wait for
    # polled to completion (is_completed settles it), then waited and asked for its future
    t = values(rank(), (5,), torch.float32)
    work = dist.all_reduce(t, async_op=True)
    deadline = time.monotonic() + 30
    while not work.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert work.is_completed()
    work.wait()
    assert torch.equal(t, want) and torch.equal(work.get_future().wait()[0], want)
    # the future first, then wait: the completion thread settles it, wait() sees its outcome
    t = values(rank(), (5,), torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    assert torch.equal(t, want) and torch.equal(fut.wait()[0], want)
    assert torch.equal(work.result()[0], want)


def test_new_group():
    n = size()
    groups = [dist.new_group([0]), dist.new_group(list(range(n))),
              dist.new_group([r for r in range(n) if r % 2 == 0])]
    for g, members in zip(groups, [[0], list(range(n)), list(range(0, n, 2))]):
        if rank() not in members:
            assert g == dist.GroupMember.NON_GROUP_MEMBER
            continue
        assert dist.get_world_size(g) == len(members)
        assert dist.get_rank(g) == members.index(rank())
        t = torch.tensor([float(rank() + 1)])
        dist.all_reduce(t, group=g)
        assert t.item() == sum(m + 1 for m in members)
        b = torch.tensor([float(rank())])
        dist.broadcast(b, src=members[-1], group=g)  # src is a global rank
        assert b.item() == members[-1]
    # the same ranks again: a group of its own, on the same process set
    again = dist.new_group([0])
    if rank() == 0:
        t = torch.ones(2)
        dist.all_reduce(t, group=again)
        assert torch.equal(t, torch.ones(2))
    dist.barrier()


def test_backend_name():
    assert dist.get_backend() == "hvd"
    assert dist.is_initialized()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_send_recv_ring(dtype):
    if size() < 2:
        pytest.skip("needs a peer")
    nxt, prv = (rank() + 1) % size(), (rank() - 1) % size()
    for shape in [(), (0,), (1,), (5, 3), (1 << 16,)]:
        got = torch.empty(shape, dtype=dtype)
        sw = dist.isend(values(rank(), shape, dtype), nxt)
        dist.recv(got, prv)
        sw.wait()
        assert torch.equal(got, values(prv, shape, dtype))


def test_isend_irecv_every_peer_with_tags():
    if size() < 2:
        pytest.skip("needs a peer")
    peers = [r for r in range(size()) if r != rank()]
    # every rank first posts all its sends (two tags to every peer), then its receives, the
    # tag-2 ones first: messages match by pair and tag, whatever the order of posting
    sends = [dist.isend(torch.full((3,), float(rank() * 100 + p * 10 + tag)), p, tag=tag)
             for p in peers for tag in (1, 2)]
    got = {(p, tag): torch.empty(3) for p in peers for tag in (2, 1)}
    recvs = [dist.irecv(t, p, tag=tag) for (p, tag), t in got.items()]
    for w in sends + recvs:
        w.wait()
    for (p, tag), t in got.items():
        assert torch.equal(t, torch.full((3,), float(p * 100 + rank() * 10 + tag)))


def test_send_recv_order_and_non_contiguous():
    if size() < 2:
        pytest.skip("needs a peer")
    if rank() == 0:
        for k in range(5):
            dist.send(torch.arange(6, dtype=torch.float32).reshape(2, 3).t() + k, 1)
    elif rank() == 1:
        for k in range(5):
            out = torch.empty(2, 3).t()  # a non-contiguous view to receive into
            dist.recv(out, 0)
            assert torch.equal(out, torch.arange(6, dtype=torch.float32).reshape(2, 3).t() + k)
    dist.barrier()


def test_recv_size_mismatch_fails_both():
    if size() < 2:
        pytest.skip("needs a peer")
    if rank() in (0, 1):
        peer = 1 - rank()
        work = dist.isend(torch.zeros(4), peer, tag=9) if rank() == 0 else \
            dist.irecv(torch.zeros(8), peer, tag=9)
        with pytest.raises(RuntimeError, match="rank 0 sends 16 bytes"):
            work.wait()
        # the failed Work keeps its error: for a second wait, exception() and its future
        assert work.is_completed() and not work.is_success()
        assert "rank 0 sends 16 bytes" in str(work.exception())
        with pytest.raises(RuntimeError, match="rank 0 sends 16 bytes"):
            work.wait()
        with pytest.raises(RuntimeError, match="rank 0 sends 16 bytes"):
            work.get_future().wait()


def test_recv_anysource_is_refused():
    if size() < 2:
        pytest.skip("needs a peer")
    with pytest.raises(RuntimeError, match="source"):
        dist.recv(torch.zeros(1))


def test_launcher_environment():
    # under horovodrun the world is hvd's; under torchrun it formed through torch's store
    if os.environ.get("HOROVOD_RANK"):
        assert dist.get_rank() == int(os.environ["HOROVOD_RANK"])
    else:
        assert dist.get_rank() == int(os.environ["RANK"])


def test_destroy_and_init_again():
    rank_before, size_before = rank(), size()
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    # The second world meets in the first one's store, under a prefix of its own: a second
    # env:// rendezvous in one process races in torch itself (rank 0 closes its TCPStore
    # server while a faster rank already reconnected to it), whatever the backend.
    store = dist.PrefixStore("again", dist.distributed_c10d._get_default_store())
    dist.destroy_process_group()
    assert not dist.is_initialized()
    dist.init_process_group("hvd", store=store, rank=rank_before, world_size=size_before,
                            timeout=datetime.timedelta(seconds=60))
    assert dist.get_backend() == "hvd"
    t = torch.tensor([float(rank())])
    dist.all_reduce(t)
    assert t.item() == sum(range(size()))


def test_gloo_under_horovodrun_keeps_torchs_rendezvous(monkeypatch):
    # the backend's env:// rendezvous stands in for torch's only for init_process_group("hvd")
    # in a horovodrun job without MASTER_ADDR; a gloo job gets torch's own, and its errors
    if not os.environ.get("HOROVOD_RANK") or os.environ.get("MASTER_ADDR"):
        pytest.skip("a horovodrun job without MASTER_ADDR")
    from horovod.torch import distributed as hvd_backend
    monkeypatch.delenv("RANK", raising=False)

    def init_process_group(backend):  # (the handler reads its caller's `backend`)
        return next(hvd_backend._env_handler("env://"))
    with pytest.raises(ValueError, match="RANK"):
        init_process_group("gloo")


def test_wrong_sizes_are_named():
    with pytest.raises(RuntimeError, match=f"the output must hold {size()} x 3 torch.float32"):
        dist.all_gather_into_tensor(torch.empty(size() * 3 + 1), torch.ones(3))
    with pytest.raises(RuntimeError, match=f"the input must hold {size()} x 2 torch.float32"):
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(size() * 2 + 1))
