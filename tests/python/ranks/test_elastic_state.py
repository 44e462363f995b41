"""hvd.elastic's states on every rank of a static job: TorchState/ObjectState save, restore
and sync (what hvd.elastic.run does around a failure), ElasticSampler's partitioning, and
run's behaviour outside elastic mode (the function runs once; its errors propagate)."""
import pytest
import torch

import horovod.torch as hvd
from horovod.common.elastic import ObjectState


@pytest.fixture(scope="module", autouse=True)
def init():
    hvd.init()
    yield


def make(opt_cls, **kw):
    torch.manual_seed(hvd.rank())  # every rank different until synced
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.BatchNorm1d(3))
    opt = hvd.DistributedOptimizer(opt_cls(model.parameters(), lr=0.1, **kw),
                                   named_parameters=model.named_parameters())
    return model, opt


def train_step(model, opt):
    opt.zero_grad()
    model(torch.ones(4, 5) * (1 + hvd.rank())).pow(2).sum().backward()
    opt.step()


def snapshot(model, opt):
    params = {k: v.clone() for k, v in model.state_dict().items()}
    state = {i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
             for i, s in opt.state_dict()["state"].items()}
    return params, state, [dict((k, v) for k, v in g.items() if k != "params")
                           for g in opt.param_groups]


def assert_same(a, b):
    pa, sa, ga = a
    pb, sb, gb = b
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    assert sa.keys() == sb.keys()
    for i in sa:
        assert sa[i].keys() == sb[i].keys()
        for k in sa[i]:
            va, vb = sa[i][k], sb[i][k]
            assert torch.equal(va, vb) if torch.is_tensor(va) else va == vb
    assert ga == gb


@pytest.mark.parametrize("opt_cls,kw", [(torch.optim.SGD, {"momentum": 0.9}),
                                        (torch.optim.Adam, {})])
def test_torch_state_restore_returns_to_the_commit(opt_cls, kw):
    model, opt = make(opt_cls, **kw)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=3, names=["a"])
    # before any step: the optimizer has no state; steps after it must not survive restore
    train_step(model, opt)
    state.epoch = 4
    state.restore()
    assert opt.state_dict()["state"] == {} and state.epoch == 3
    train_step(model, opt)
    state.commit()  # no host updates outside elastic mode: nothing raised
    committed = snapshot(model, opt)
    for _ in range(2):  # commits again and again reuse their copies: each must stay exact
        train_step(model, opt)
        for g in opt.param_groups:
            g["lr"] = 0.5
        state.epoch, state.names = 9, ["b"]
        state.restore()
        assert_same(snapshot(model, opt), committed)
        assert state.epoch == 3 and state.names == ["a"]
        train_step(model, opt)
        state.commit()
        committed = snapshot(model, opt)


def test_torch_state_sync_makes_every_rank_rank_zeros():
    model, opt = make(torch.optim.SGD, momentum=0.9)
    train_step(model, opt)  # a momentum buffer, different on every rank
    state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=hvd.rank())
    state.sync()
    assert state.epoch == 0
    mine = snapshot(model, opt)
    gathered = hvd.allgather_object(mine)
    for other in gathered:
        assert_same(other, gathered[0])


def test_object_state_and_reset_callbacks():
    state = ObjectState(hvd.broadcast_object, hvd.rank, step=hvd.rank(), tag="x")
    calls = []
    state.register_reset_callbacks([lambda: calls.append(1), lambda: calls.append(2)])
    state.sync()
    assert state.step == 0
    state.step = 5
    state.save()
    state.step = 6
    state.restore()
    assert state.step == 5
    state.on_reset()
    assert calls == [1, 2]


@pytest.mark.parametrize("n", [0, 1, 7, 20])
def test_elastic_sampler_partitions_what_is_left(n):
    data = list(range(n))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    size = hvd.size()
    assert len(sampler) == -(-n // size)
    mine = list(iter(sampler))
    assert len(mine) == len(sampler)
    everyone = [i for part in hvd.allgather_object(mine) for i in part]
    assert set(everyone) == set(data)  # padded by repetition to equal shares
    sampler.record_batch(0, 1)  # one sample on every rank processed
    done = min(n, size)
    sampler.load_state_dict(sampler.state_dict())  # what a sync or restore does
    left = [i for part in hvd.allgather_object(list(iter(sampler))) for i in part]
    order = list(range(n))
    import random
    random.Random(3).shuffle(order)
    assert set(left) == set(order[done:])
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and len(list(iter(sampler))) == -(-n // size)


def test_run_outside_elastic_mode_runs_once_and_raises():
    state = ObjectState(hvd.broadcast_object, hvd.rank, value=hvd.rank())
    calls = []

    @hvd.elastic.run
    def train(state, inc, mul=1):
        calls.append(state.value)
        return (state.value + inc) * mul

    assert train(state, 2, mul=3) == 6  # synced from rank 0 first
    assert calls == [0]

    @hvd.elastic.run
    def lost(state):
        raise hvd.HorovodInternalError("peer gone")

    with pytest.raises(hvd.HorovodInternalError, match="peer gone"):
        lost(state)

    @hvd.elastic.run
    def other(state):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        other(state)
    assert hvd.allreduce(torch.ones(1), name="after_run").item() == 1.0  # still usable
