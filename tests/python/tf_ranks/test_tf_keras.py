"""horovod.tensorflow.keras and horovod.keras on every rank of a horovodrun job, with the Keras
that tf.keras is: run once with Keras 3 (TensorFlow's default) and once with tf-keras
(TF_USE_LEGACY_KERAS=1, Keras 2); the tests use only what both have. Every rank runs the same
tests in the same order."""
import os

import numpy as np
import pytest
import tensorflow as tf

import horovod.keras as hvd_keras
import horovod.tensorflow.keras as hvd

LEGACY = os.environ.get("TF_USE_LEGACY_KERAS", "0") not in ("", "0")


@pytest.fixture(scope="module", autouse=True)
def horovod():
    hvd.init()
    yield


def test_the_expected_keras():
    flavour = type(tf.keras.optimizers.SGD()).__module__.split(".")[0]
    assert flavour == ("tf_keras" if LEGACY else "keras")


def same_on_every_rank(arrays):
    """Whether every rank holds the same arrays (rank 0's, compared through an allgather)."""
    flat = np.concatenate([np.ravel(a).astype(np.float64) for a in arrays])
    every = hvd.allgather(tf.constant(flat[np.newaxis, :])).numpy()
    return all(np.allclose(every[0], row) for row in every)


def small_model(seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.layers.Input((4,)),
                                tf.keras.layers.Dense(8, activation="relu"),
                                tf.keras.layers.Dense(1)])


def data(rank, n=64):
    rng = np.random.default_rng(rank)
    x = rng.random((n, 4), dtype=np.float32)
    return x, x.sum(axis=1, keepdims=True)


def test_fit_with_callbacks_keeps_ranks_alike():
    size, rank = hvd.size(), hvd.rank()
    model = small_model(seed=rank)  # different initial weights on every rank
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.01 * size))
    assert isinstance(opt, tf.keras.optimizers.SGD) and type(opt).__name__ == "SGD"
    model.compile(optimizer=opt, loss="mse")
    seen = []

    class Record(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append((epoch, float(tf.keras.backend.get_value(self.model.optimizer.learning_rate)),
                         logs["loss"]))

    x, y = data(rank)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01 * size, warmup_epochs=2,
                                                          steps_per_epoch=4),
                 hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.01 * size,
                                                            multiplier=0.5, start_epoch=3),
                 Record()]
    model.fit(x, y, batch_size=16, epochs=4, callbacks=callbacks, verbose=0)
    # broadcast at the start + averaged gradients: the same weights everywhere at the end
    assert same_on_every_rank(model.get_weights())
    # the averaged loss is the same on every rank
    assert same_on_every_rank([[loss for _, _, loss in seen]])
    lrs = [lr for _, lr, _ in seen]
    assert lrs[0] < 0.01 * size  # warming up
    np.testing.assert_allclose(lrs[3], 0.005 * size, rtol=1e-6)  # scheduled


def test_gradient_aggregation_applies_every_n_steps():
    size, rank = hvd.size(), hvd.rank()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0),
                                   backward_passes_per_step=2,
                                   average_aggregated_gradients=True)
    w = tf.Variable([0.0])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = -w * float(rank + 1)  # gradient -(rank + 1)
        grads = tape.gradient(loss, [w])
        opt.apply_gradients(zip(grads, [w]))

    mean_grad = sum(range(1, size + 1)) / size
    step()
    np.testing.assert_allclose(w.numpy(), [0.0])  # aggregated, not applied
    step()
    np.testing.assert_allclose(w.numpy(), [mean_grad])  # the average of the two, reduced
    assert int(opt._agg_helper.counter.numpy()) == 0
    assert int(opt.iterations.numpy()) == 2


def test_partial_distributed_optimizer_keeps_local_gradients():
    size, rank = hvd.size(), hvd.rank()
    model = small_model(seed=7)
    model.build((None, 4))
    opt = hvd_keras.PartialDistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0),
                                                local_layers=[model.layers[0]])
    before = [v.numpy().copy() for v in model.trainable_variables]
    x = tf.constant(np.full((2, 4), float(rank + 1), np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    local = {id(v) for v in model.layers[0].trainable_variables}
    for v, b, g in zip(model.trainable_variables, before, grads):
        step = b - v.numpy()
        if id(v) in local:
            # this rank's own gradient, divided by the size (scale_local_gradients)
            np.testing.assert_allclose(step, g.numpy() / size, rtol=1e-5, atol=1e-6)
        else:
            assert same_on_every_rank([step])


def test_sync_batch_normalization_uses_the_global_batch():
    size, rank = hvd.size(), hvd.rank()
    every = [np.arange(8, dtype=np.float32).reshape(4, 2) * (r + 1) for r in range(size)]
    layer = hvd_sync_bn()
    out = layer(tf.constant(every[rank]), training=True).numpy()
    whole = np.concatenate(every)
    want = (every[rank] - whole.mean(0)) / np.sqrt(whole.var(0) + layer.epsilon)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def hvd_sync_bn():
    import horovod.tensorflow as hvd_tf
    return hvd_tf.SyncBatchNormalization(axis=1)


def test_load_model_wraps_the_optimizer(tmp_path):
    model = small_model(seed=1)
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.01)), loss="mse")
    x, y = data(0, 16)
    model.fit(x, y, epochs=1, verbose=0)
    path = str(tmp_path / f"model{hvd.rank()}.keras")
    model.save(path)
    loaded = hvd.load_model(path)
    assert type(loaded.optimizer).__name__ == "Adam"
    assert getattr(type(loaded.optimizer), "_hvd", None) is not None  # distributed
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    loaded.fit(x, y, epochs=1, verbose=0)
    # the plain Keras loader reads the file too (it records the plain optimizer)
    assert tf.keras.models.load_model(path) is not None


def test_elastic_keras_state_sync_restore_commit():
    rank = hvd.rank()
    model = small_model(seed=rank)
    model.build((None, 4))
    state = hvd.elastic.KerasState(model, tf.keras.optimizers.SGD(0.1), batch=rank, epoch=rank)
    state.sync()
    assert state.batch == 0 and state.epoch == 0
    assert same_on_every_rank(model.get_weights())
    synced = [w.copy() for w in model.get_weights()]
    model.set_weights([w + 1 for w in synced])
    state.batch = 5
    state.restore()
    assert state.batch == 0
    for a, b in zip(model.get_weights(), synced):
        np.testing.assert_array_equal(a, b)
    model.set_weights([w + 1 for w in synced])
    state.commit()
    state.restore()
    for a, b in zip(model.get_weights(), synced):
        np.testing.assert_array_equal(a, b + 1)


def test_keras_collectives():
    size, rank = hvd.size(), hvd.rank()
    np.testing.assert_allclose(np.asarray(hvd.allreduce([float(rank)], op=hvd.Sum)),
                               [sum(range(size))])
    np.testing.assert_array_equal(np.asarray(hvd.allgather([rank])), list(range(size)))
    np.testing.assert_array_equal(np.asarray(hvd.broadcast([rank], 0)), [0])
