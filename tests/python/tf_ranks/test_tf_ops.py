"""horovod.tensorflow's collectives on every rank of a horovodrun job (np 2 and 3 in CI): each
op on its dtypes and on sizes 0, 1 and odd, eagerly and inside tf.function, with the values
every rank can compute; Horovod's gradients; TensorFlow's error classes for what went wrong;
process sets, join, and the topology ops. Every rank runs the same tests in the same order."""
import os

import numpy as np
import pytest
import tensorflow as tf

import horovod.tensorflow as hvd

REDUCE_TYPES = [tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.float32, tf.float64]
ANY_TYPES = REDUCE_TYPES + [tf.uint16, tf.int16, tf.bool]
SHAPES = [[0], [1], [17], [3, 5]]

pair = hvd.ProcessSet([0, 1])  # a proper subset from np 3 on


@pytest.fixture(scope="module", autouse=True)
def horovod():
    hvd.init(process_sets=[pair] if int(os.environ.get("HOROVOD_SIZE", "1")) > 2 else None)
    yield


def modes():
    """The same computation eagerly and traced into a graph."""
    return [("eager", lambda f: f), ("function", tf.function)]


def values(shape, dtype, r):
    """Rank r's input: small numbers every dtype holds, different on every rank."""
    n = int(np.prod(shape))
    base = (np.arange(n) % 3 + r + 1).reshape(shape)
    if dtype == tf.bool:
        return tf.constant((base + r) % 2 == 0)
    return tf.cast(tf.constant(base), dtype)


@pytest.mark.parametrize("mode,wrap", modes())
@pytest.mark.parametrize("dtype", REDUCE_TYPES)
def test_allreduce_every_op(mode, wrap, dtype):
    size, rank = hvd.size(), hvd.rank()
    for shape in SHAPES:
        every = np.stack([values(shape, dtype, r).numpy().astype(np.float64) for r in range(size)])
        ops = {hvd.Sum: every.sum(0), hvd.Min: every.min(0), hvd.Max: every.max(0),
               hvd.Product: every.prod(0)}
        if dtype.is_floating:
            ops[hvd.Average] = every.mean(0)
        for op, want in ops.items():
            if dtype in (tf.uint8, tf.int8) and op in (hvd.Sum, hvd.Product) and want.size and want.max() > 100:
                continue
            got = wrap(lambda t: hvd.allreduce(t, op=op))(values(shape, dtype, rank))
            assert got.dtype == dtype and got.shape == shape
            np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=1e-3)


@pytest.mark.parametrize("mode,wrap", modes())
def test_allreduce_scaling_compression_and_grouped(mode, wrap):
    size, rank = hvd.size(), hvd.rank()
    t = tf.fill([7], float(rank + 1))
    total = sum(r + 1 for r in range(size))
    got = wrap(lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                                       postscale_factor=0.5))(t)
    np.testing.assert_allclose(got.numpy(), np.full(7, total, np.float32))
    got = wrap(lambda x: hvd.allreduce(x, compression=hvd.Compression.fp16))(t)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), np.full(7, total / size), rtol=1e-3)
    got = wrap(lambda a, b, c: hvd.grouped_allreduce([a, b, c], op=hvd.Sum))(
        t, tf.ones([2, 2], tf.float64), tf.zeros([0], tf.int32))
    np.testing.assert_allclose(got[0].numpy(), np.full(7, total))
    assert got[1].dtype == tf.float64 and got[2].shape == [0]
    np.testing.assert_allclose(got[1].numpy(), np.full([2, 2], size))


def test_adasum():
    # Adasum of vectors that are all the same is that vector; of orthogonal ones, their sum
    size, rank = hvd.size(), hvd.rank()
    same = hvd.allreduce(tf.constant([3.0, 4.0]), op=hvd.Adasum)
    np.testing.assert_allclose(same.numpy(), [3.0, 4.0], rtol=1e-6)
    onehot = tf.one_hot(rank, size, dtype=tf.float64)
    got = hvd.allreduce(onehot, op=hvd.Adasum, name="adasum.orthogonal")
    np.testing.assert_allclose(got.numpy(), np.ones(size), rtol=1e-6)


@pytest.mark.parametrize("mode,wrap", modes())
@pytest.mark.parametrize("dtype", ANY_TYPES)
def test_allgather_rows_differ_per_rank(mode, wrap, dtype):
    size, rank = hvd.size(), hvd.rank()
    mine = values([rank, 3], dtype, rank)  # rank 0 sends no rows at all
    got = wrap(lambda t: hvd.allgather(t))(mine)
    want = np.concatenate([values([r, 3], dtype, r).numpy() for r in range(size)])
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), want)
    outs = wrap(lambda a, b: hvd.grouped_allgather([a, b]))(mine, values([1], dtype, rank))
    np.testing.assert_array_equal(outs[0].numpy(), want)
    np.testing.assert_array_equal(
        outs[1].numpy(), np.concatenate([values([1], dtype, r).numpy() for r in range(size)]))


@pytest.mark.parametrize("mode,wrap", modes())
@pytest.mark.parametrize("dtype", ANY_TYPES)
def test_broadcast_from_every_root(mode, wrap, dtype):
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        for shape in ([0], [1], [4, 3]):
            got = wrap(lambda t: hvd.broadcast(t, root))(values(shape, dtype, rank))
            np.testing.assert_array_equal(got.numpy(), values(shape, dtype, root).numpy())


@pytest.mark.parametrize("mode,wrap", modes())
def test_alltoall_splits_and_received_splits(mode, wrap):
    size, rank = hvd.size(), hvd.rank()
    # rank r sends r + d rows to rank d, each row [r, d]
    rows = [[rank, d] for d in range(size) for _ in range(rank + d)]
    splits = [rank + d for d in range(size)]
    t = tf.constant(rows, tf.int64) if rows else tf.zeros([0, 2], tf.int64)
    out, received = wrap(lambda x, s: hvd.alltoall(x, splits=s))(t, tf.constant(splits, tf.int32))
    want = [[s, rank] for s in range(size) for _ in range(s + rank)]
    np.testing.assert_array_equal(out.numpy().reshape(-1, 2), np.array(want).reshape(-1, 2))
    np.testing.assert_array_equal(received.numpy(), [s + rank for s in range(size)])
    # equal split, the output alone (Horovod returns received_splits only with splits)
    even = wrap(lambda x: hvd.alltoall(x))(tf.fill([2 * size], float(rank)))
    np.testing.assert_array_equal(even.numpy(), np.repeat(np.arange(size, dtype=np.float32), 2))


@pytest.mark.parametrize("mode,wrap", modes())
def test_reducescatter_uneven_rows(mode, wrap):
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1  # the first rank gets a row more
    t = tf.reshape(tf.range(rows * 2, dtype=tf.float32), [rows, 2]) * (rank + 1)
    got = wrap(lambda x: hvd.reducescatter(x, op=hvd.Sum))(t)
    full = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * sum(range(1, size + 1))
    mine = [r for r in range(rows) if r in _my_rows(rows, size, rank)]
    np.testing.assert_allclose(got.numpy(), full[mine])
    outs = wrap(lambda a, b: hvd.grouped_reducescatter([a, b], op=hvd.Average))(t, t * 2)
    np.testing.assert_allclose(outs[1].numpy(), full[mine] * 2 / size, rtol=1e-6)


def _my_rows(rows, size, rank):
    start = sum(rows // size + (1 if r < rows % size else 0) for r in range(rank))
    return range(start, start + rows // size + (1 if rank < rows % size else 0))


def test_gradients_are_horovods():
    size, rank = hvd.size(), hvd.rank()
    x = tf.Variable(tf.fill([size, 3], float(rank + 1)))
    with tf.GradientTape(persistent=True) as tape:
        summed = hvd.allreduce(x, op=hvd.Sum)
        gathered = hvd.allgather(x)
        bcast = hvd.broadcast(x, 0)
        scattered = hvd.reducescatter(x, op=hvd.Sum)
    # allreduce: the allreduced gradient
    np.testing.assert_allclose(tape.gradient(summed, x).numpy(), np.full([size, 3], size))
    # allgather: the gradient averaged over the ranks, this rank's rows
    np.testing.assert_allclose(tape.gradient(gathered, x).numpy(), np.ones([size, 3]))
    # broadcast: the averaged gradient on the root, zeros elsewhere
    np.testing.assert_allclose(tape.gradient(bcast, x).numpy(),
                               np.full([size, 3], 1.0 if rank == 0 else 0.0))
    # reducescatter (Sum): Horovod scales the gathered gradient by the size
    np.testing.assert_allclose(tape.gradient(scattered, x).numpy(), np.full([size, 3], size))


def test_distributed_gradient_tape_averages():
    size, rank = hvd.size(), hvd.rank()
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(rank + 1))
    tape = hvd.DistributedGradientTape(tape)
    grad = tape.gradient(loss, [w])[0]
    np.testing.assert_allclose(grad.numpy(), np.full(2, sum(range(1, size + 1)) / size))


def test_mismatch_is_failed_precondition_and_bad_argument_invalid_argument():
    size, rank = hvd.size(), hvd.rank()
    if size == 1:
        pytest.skip("needs two ranks")
    with pytest.raises(tf.errors.FailedPreconditionError):
        hvd.allreduce(tf.ones([3], tf.float32 if rank == 0 else tf.float64), name="mismatch.type")
    with pytest.raises(tf.errors.FailedPreconditionError):
        hvd.allreduce(tf.ones([3 + rank]), name="mismatch.shape")
    with pytest.raises(tf.errors.InvalidArgumentError):
        hvd.alltoall(tf.ones([size + 1]))  # no even split
    # the job goes on after errors
    np.testing.assert_allclose(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(), [size, size])


def test_process_set():
    size, rank = hvd.size(), hvd.rank()
    if size < 3:
        pytest.skip("needs three ranks (a set of two that is not every rank)")
    if pair.included():
        got = hvd.allreduce(tf.constant([float(rank)]), op=hvd.Sum, process_set=pair)
        np.testing.assert_allclose(got.numpy(), [1.0])
        assert int(hvd.size_op(process_set_id=pair.process_set_id)) == 2
    assert int(hvd.process_set_included_op(pair.process_set_id)) == (1 if rank < 2 else 0)


def test_topology_ops_and_join():
    assert int(hvd.rank_op()) == hvd.rank()
    assert int(hvd.size_op()) == hvd.size()
    assert int(hvd.local_rank_op()) == hvd.local_rank()
    assert int(hvd.local_size_op()) == hvd.local_size()
    # rank 0 runs one allreduce more; the others have joined and contribute zeros
    if hvd.rank() == 0:
        got = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after.join")
        np.testing.assert_allclose(got.numpy(), [1.0, 1.0])
    assert int(hvd.join()) in range(hvd.size())
    hvd.barrier()


def test_broadcast_variables_and_objects():
    rank = hvd.rank()
    v = tf.Variable([float(rank)] * 3)
    hvd.broadcast_variables([v], root_rank=0)
    np.testing.assert_array_equal(v.numpy(), [0.0] * 3)
    assert hvd.broadcast_object({"from": rank}, root_rank=0) == {"from": 0}
    assert hvd.allgather_object(rank) == list(range(hvd.size()))


def test_many_collectives_in_one_function():
    # every allreduce of a graph in flight at once, negotiated and fused together
    size = hvd.size()

    @tf.function
    def step(ts):
        return [hvd.allreduce(t, op=hvd.Sum, name=f"many.{i}") for i, t in enumerate(ts)]

    outs = step([tf.fill([i + 1], 1.0) for i in range(40)])
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.numpy(), np.full(i + 1, size))
