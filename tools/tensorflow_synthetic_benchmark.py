"""Keras training throughput on synthetic data, the MLP of tools/pytorch_synthetic_benchmark.py
(784-1024-1024-1024-10, 11.6 MB of gradients), side by side:

    --hvd     under horovodrun: hvd.DistributedOptimizer (gradients averaged by libhvd)
    --mwms    tf.distribute.MultiWorkerMirroredStrategy: this tool starts the workers itself,
              each with its TF_CONFIG (ring collectives over gRPC on loopback)
    --no-comm under horovodrun: every rank trains alone (the floor: no exchange at all)

    horovodrun -np 2 python tools/tensorflow_synthetic_benchmark.py --hvd --batch-size 8
    python tools/tensorflow_synthetic_benchmark.py --mwms --np 2 --batch-size 8

Each rank (worker) trains on its own batch of --batch-size; model.fit runs warm-up batches,
then --num-iters timed iterations of --num-batches-per-iter batches (a callback times them).
Rank 0 prints "img/s: mean +- spread" over the iterations, for the whole job.

    --allreduce-cost  under horovodrun: the per-call time of a 1-element hvd.allreduce,
                      eagerly and inside a tf.function (microseconds)
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
mode = parser.add_mutually_exclusive_group(required=True)
mode.add_argument("--hvd", action="store_true")
mode.add_argument("--mwms", action="store_true")
mode.add_argument("--no-comm", action="store_true")
mode.add_argument("--allreduce-cost", action="store_true")
parser.add_argument("--np", type=int, default=2, help="--mwms: the number of workers")
parser.add_argument("--batch-size", type=int, default=8, help="per rank")
parser.add_argument("--num-warmup-batches", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--calls", type=int, default=2000, help="--allreduce-cost: calls per form")
parser.add_argument("--threads", type=int, default=0,
                    help="TensorFlow threads per process (default: cores / processes)")


def mlp(tf):
    return tf.keras.Sequential([tf.keras.layers.Input((784,)),
                                tf.keras.layers.Dense(1024, activation="relu"),
                                tf.keras.layers.Dense(1024, activation="relu"),
                                tf.keras.layers.Dense(1024, activation="relu"),
                                tf.keras.layers.Dense(10)])


def set_threads(tf, processes, threads):
    n = threads or max(1, (os.cpu_count() or 1) // processes)
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)


class Timer:
    """A Keras callback timing every num_batches_per_iter batches after the warm-up."""

    def __init__(self, tf, args):
        outer = self

        class _CB(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                outer.tick(batch)

        self.callback = _CB()
        self.args = args
        self.marks = []

    def tick(self, batch):
        a = self.args
        done = batch + 1 - a.num_warmup_batches
        if done >= 0 and done % a.num_batches_per_iter == 0:
            self.marks.append(time.perf_counter())

    def rates(self, images_per_batch):
        per = self.args.num_batches_per_iter * images_per_batch
        return [per / (b - a) for a, b in zip(self.marks, self.marks[1:])]


def _in_scope(scope, fn):
    with scope:
        return fn()


def train(tf, args, rank, size, distribute, scope=None):
    """model.fit of the MLP; the job's img/s per timed iteration."""
    steps = args.num_warmup_batches + args.num_batches_per_iter * args.num_iters
    tf.keras.utils.set_random_seed(42)
    global_batch = args.batch_size * (size if args.mwms else 1)
    x = tf.random.uniform([global_batch, 784])
    y = tf.random.uniform([global_batch], maxval=10, dtype=tf.int64)
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    if args.mwms:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        data = data.with_options(options)
    def compile_model():
        model, opt = distribute()
        model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        return model

    model = compile_model() if scope is None else _in_scope(scope, compile_model)
    timer = Timer(tf, args)
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[timer.callback])
    return [r * size for r in timer.rates(args.batch_size)]


def report(rates, what):
    import statistics
    mean = statistics.mean(rates)
    spread = 1.96 * statistics.pstdev(rates)
    print(f"{what}: img/s: {mean:.1f} +- {spread:.1f}", flush=True)


def run_horovod(args):
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    set_threads(tf, hvd.local_size(), args.threads)
    if args.allreduce_cost:
        return allreduce_cost(tf, args)

    def distribute():
        model = mlp(tf)
        opt = tf.keras.optimizers.SGD(0.01)
        if args.hvd:
            opt = hvd.DistributedOptimizer(opt)
        return model, opt

    rates = train(tf, args, hvd.rank(), hvd.size(), distribute)
    if hvd.rank() == 0:
        report(rates, f"{'hvd' if args.hvd else 'no-comm'} np {hvd.size()} batch {args.batch_size}")


def allreduce_cost(tf, args):
    import horovod.tensorflow as hvd
    x = tf.constant([1.0])

    @tf.function
    def in_function(t):
        return hvd.allreduce(t, name="cost.fn", op=hvd.Sum)

    results = {}
    for form, call in (("eager", lambda: hvd.allreduce(x, name="cost.eager", op=hvd.Sum)),
                       ("tf.function", lambda: in_function(x))):
        for _ in range(50):
            call()
        hvd.allreduce(x, name=f"cost.sync.{form}")  # (Horovod 0.28.1's TensorFlow API has no barrier)
        start = time.perf_counter()
        for _ in range(args.calls):
            call()
        results[form] = (time.perf_counter() - start) / args.calls * 1e6
    if hvd.rank() == 0:
        print(f"1-element allreduce np {hvd.size()}: eager {results['eager']:.1f} us, "
              f"tf.function {results['tf.function']:.1f} us per call", flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_mwms_worker(args):
    import tensorflow as tf
    size = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    set_threads(tf, size, args.threads)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))

    def distribute():
        return mlp(tf), tf.keras.optimizers.SGD(0.01)

    rates = train(tf, args, rank, size, distribute, scope=strategy.scope())
    if rank == 0:
        report(rates, f"mwms np {size} batch {args.batch_size}")


def launch_mwms(args):
    """Start the workers, each with its TF_CONFIG, and wait for them."""
    ports = free_ports(args.np)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(args.np):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                     "task": {"type": "worker", "index": i}}),
                   HVD_MWMS_WORKER="1")
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    rc = 0
    for p in procs:
        rc = p.wait() or rc
    sys.exit(rc)


def main():
    args = parser.parse_args()
    if args.mwms:
        if os.environ.get("HVD_MWMS_WORKER"):
            run_mwms_worker(args)
        else:
            launch_mwms(args)
    else:
        run_horovod(args)


if __name__ == "__main__":
    main()
