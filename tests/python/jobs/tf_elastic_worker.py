"""A deterministic elastic TensorFlow worker for tests/python/test_tf_jobs.py, the twin of
elastic_worker.py for horovod.tensorflow:

    horovodrun --host-discovery-script d.sh -np 2 --min-np 1 python tf_elastic_worker.py
        --steps N --commit-every K [--sleep-ms M]

The state is an hvd.elastic.TensorFlowKerasState: a Keras model (one Dense layer of 4 weights,
no bias, from zeros) with plain SGD, and the attributes step and acc. Each step every rank
allreduces (Average) the value `step`, which every rank computes alike, so the result must be
step itself; acc += result; the loss sum(weights) goes through DistributedGradientTape (the
gradient, 1 on every rank, averaged: 1) and SGD steps; step += 1. Every K steps the state is
committed and rank 0 prints "commit <step / K> step <step> size <size>". After every
(re)initialisation every rank prints "pid <rank> <host> <pid>". At the end every rank checks
acc == N (N - 1) / 2 and every weight == -LR N, so progress lost or counted twice fails the run
(exit 1), and rank 0 prints "done step <N> acc <acc> resets <resets>".
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402

LR = 0.01

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--commit-every", type=int, required=True)
parser.add_argument("--sleep-ms", type=int, default=0)
args = parser.parse_args()

hvd.init()
model = tf.keras.Sequential([tf.keras.layers.Input((1,)),
                             tf.keras.layers.Dense(4, use_bias=False, kernel_initializer="zeros")])
opt = tf.keras.optimizers.SGD(LR)
resets = [0]


def announce():
    print(f"pid {hvd.rank()} {os.environ.get('HOROVOD_HOSTNAME', '?')} {os.getpid()}", flush=True)


def on_reset():
    resets[0] += 1
    announce()


state = hvd.elastic.TensorFlowKerasState(model, opt, step=0, acc=0.0)
state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.step < args.steps:
        r = float(hvd.allreduce(tf.constant(float(state.step)), op=hvd.Average,
                                name="elastic.step"))
        if r != state.step:
            print(f"rank {hvd.rank()}: step {state.step} but the ranks averaged {r}", flush=True)
            sys.exit(1)
        state.acc += r
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model.trainable_variables[0])
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        state.step += 1
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        if state.step % args.commit_every == 0:
            state.commit()
            if hvd.rank() == 0:
                print(f"commit {state.step // args.commit_every} step {state.step} "
                      f"size {hvd.size()}", flush=True)


announce()
train(state)
n = args.steps
weights = model.get_weights()[0]
ok = state.acc == n * (n - 1) / 2 and np.allclose(weights, -LR * n, rtol=1e-4)
if not ok:
    print(f"rank {hvd.rank()}: acc {state.acc} (want {n * (n - 1) / 2}), weights "
          f"{weights.ravel()} (want {-LR * n})", flush=True)
    sys.exit(1)
if hvd.rank() == 0:
    print(f"done step {n} acc {state.acc} resets {resets[0]}", flush=True)
