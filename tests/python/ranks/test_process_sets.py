"""Process sets: static (hvd.init(process_sets=...)) and dynamic (add/remove_process_set),
overlapping sets, a set this rank is not in, every collective on a set. Every rank of the job
runs these tests (np 1, 2 and 3 in CI); sets need at least two ranks."""
import os

import pytest
import torch

import horovod.torch as hvd

pytestmark = pytest.mark.skipif(int(os.environ.get("HOROVOD_SIZE", "1")) < 2,
                                reason="a process set smaller than the job needs two ranks")


@pytest.fixture(scope="module", autouse=True)
def dynamic_sets():
    # the mode is read at init (as Horovod's core does): start this module's world with it
    if hvd.is_initialized():
        hvd.shutdown()
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    hvd.init()
    yield
    os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    hvd.shutdown()
    hvd.init()


def test_static_process_sets_at_init():
    hvd.shutdown()
    evens = hvd.ProcessSet(range(0, hvd_size(), 2))
    odds = hvd.ProcessSet(range(1, hvd_size(), 2))
    hvd.init(process_sets=[evens, odds])
    assert evens.process_set_id is not None and odds.process_set_id is not None
    mine, other = (evens, odds) if hvd.rank() % 2 == 0 else (odds, evens)
    assert mine.included() and not other.included()
    assert mine.size() == len(mine.ranks)
    assert mine.rank() == mine.ranks.index(hvd.rank())
    out = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum, process_set=mine)
    assert out.item() == float(sum(mine.ranks))
    with pytest.raises(ValueError, match="not a member"):
        hvd.allreduce(torch.ones(1), process_set=other)
    # the global set still works alongside
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
    # static sets live until shutdown: start the next tests without them
    hvd.shutdown()
    hvd.init()
    assert evens.process_set_id is None


def hvd_size():
    return int(os.environ.get("HOROVOD_SIZE", "1"))


def test_dynamic_add_every_collective_and_remove():
    n = hvd.size()
    members = [0, n - 1] if n > 2 else [1]  # never every rank: that is the global set
    ps = hvd.add_process_set(members)
    assert ps.ranks == members
    inside = hvd.rank() in members
    assert ps.included() == inside
    if inside:
        k, me = len(members), ps.rank()
        t = torch.full((3,), float(hvd.rank() + 1))
        assert hvd.allreduce(t, op=hvd.Sum, process_set=ps).tolist() == \
            [float(sum(r + 1 for r in members))] * 3
        g = hvd.allgather(torch.full((me + 1, 2), float(me)), process_set=ps)
        assert g.tolist() == [[float(m), float(m)] for m in range(k) for _ in range(m + 1)]
        b = hvd.broadcast(torch.tensor([hvd.rank()]), root_rank=members[-1], process_set=ps)
        assert b.tolist() == [members[-1]]
        a = hvd.alltoall(torch.tensor([10 * me + j for j in range(k)]), process_set=ps)
        assert a.tolist() == [10 * m + me for m in range(k)]
        # splits: one per member of the set (member m sends m + j + 1 rows to member j)
        splits = torch.tensor([me + j + 1 for j in range(k)], dtype=torch.int32)
        a, received = hvd.alltoall(torch.full((int(splits.sum()),), float(me)), splits=splits,
                                   process_set=ps)
        assert received.tolist() == [m + me + 1 for m in range(k)]
        assert a.tolist() == [float(m) for m in range(k) for _ in range(m + me + 1)]
        r = hvd.reducescatter(torch.ones(2 * k, 1), op=hvd.Sum, process_set=ps)
        assert r.tolist() == [[float(k)], [float(k)]]
        hvd.barrier(process_set=ps)
    else:
        with pytest.raises(ValueError, match="not a member"):
            hvd.allreduce(torch.ones(1), process_set=ps)
    hvd.barrier()
    assert hvd.remove_process_set(ps)
    assert ps.process_set_id is None
    assert not hvd.remove_process_set(ps)


def test_overlapping_sets_interleaved():
    n = hvd.size()
    a = hvd.add_process_set([0, 1] if n > 2 else [0])
    b = hvd.add_process_set([1, n - 1] if n > 2 else [1])
    handles = []
    for step in range(5):
        if a.included():
            handles.append((a, step, hvd.allreduce_async(torch.tensor([1.0 + step]), op=hvd.Sum,
                                                         name=f"ov.a.{step}", process_set=a)))
        if b.included():
            handles.append((b, step, hvd.allreduce_async(torch.tensor([2.0 * step]), op=hvd.Sum,
                                                         name=f"ov.b.{step}", process_set=b)))
        handles.append((None, step, hvd.allreduce_async(torch.tensor([1.0]), op=hvd.Sum,
                                                        name=f"ov.all.{step}")))
    for ps, step, h in reversed(handles):
        got = hvd.synchronize(h).item()
        if ps is not None:
            per_member = 1.0 + step if ps is a else 2.0 * step
            assert got == len(ps.ranks) * per_member
        else:
            assert got == float(n)
    hvd.barrier()
    hvd.remove_process_set(a)
    hvd.remove_process_set(b)


@pytest.mark.skipif(int(os.environ.get("HOROVOD_SIZE", "1")) < 3,
                    reason="a set with a joined member beside a rank outside it needs 3 ranks")
def test_joined_member_takes_part_in_its_sets_allreduce():
    """A rank that has joined adds zeros to the allreduces of the process sets it is in, as it
    does in the whole job, and their allgathers fail at once with Join's error; before, an
    operation of such a set waited forever for the joined member."""
    ps = hvd.add_process_set([0, 1])
    if hvd.rank() == 0:
        x = torch.tensor([3.0, 5.0])
        assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="pj.sum"), x)
        assert torch.equal(hvd.allreduce(x, op=hvd.Average, process_set=ps, name="pj.avg"), x / 2)
        with pytest.raises(hvd.HorovodInternalError, match="Allgather is not supported with Join"):
            hvd.allgather(x, process_set=ps, name="pj.gather")
    last = hvd.join()
    assert last in (0, 2)  # rank 1 joined before rank 0's allreduces could finish
    hvd.remove_process_set(ps)


def test_registration_errors():
    with pytest.raises(ValueError):
        hvd.add_process_set([0, 0])
    with pytest.raises(ValueError):
        hvd.add_process_set([0, hvd.size()])
    with pytest.raises(ValueError):
        hvd.add_process_set(list(range(hvd.size())))  # every rank: the global set
    ps = hvd.add_process_set([1])
    with pytest.raises(ValueError):
        hvd.add_process_set(hvd.ProcessSet([1]))  # the same ranks again
    hvd.remove_process_set(ps)
    # Horovod's answer for the global set: False, nothing removed
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()


def test_mismatched_registration_fails_on_every_rank():
    ranks = [0] if hvd.rank() == 0 else [1]
    with pytest.raises(hvd.HorovodInternalError, match="mismatching values"):
        hvd.add_process_set(ranks)
    # nothing was registered: the next registration agrees
    ps = hvd.add_process_set([0])
    assert ps.process_set_id is not None
    hvd.remove_process_set(ps)


def test_dynamic_sets_need_the_variable_at_init():
    # changing the variable after init changes nothing (Horovod reads it once)
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "0"
    ps = hvd.add_process_set([0])
    assert hvd.remove_process_set(ps)
    hvd.shutdown()
    hvd.init()
    try:
        with pytest.raises(ValueError, match="HOROVOD_DYNAMIC_PROCESS_SETS"):
            hvd.add_process_set([0])
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        with pytest.raises(ValueError, match="HOROVOD_DYNAMIC_PROCESS_SETS"):
            hvd.add_process_set([0])
    finally:
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        hvd.shutdown()
        hvd.init()


def test_init_dynamic_argument():
    hvd.shutdown()
    os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    try:
        hvd.init(process_sets="DYNAMIC")
        ps = hvd.add_process_set([0])
        assert ps.included() == (hvd.rank() == 0)
        assert hvd.remove_process_set(ps)
    finally:
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        hvd.shutdown()
        hvd.init()
