"""Train a small CNN with Horovod's Keras API (model.fit), data-parallel: Horovod's
examples/tensorflow2/tensorflow2_keras_mnist.py on Debian's Fashion-MNIST.

    horovodrun -np 2 /opt/hvd/venv-tf/bin/python examples/tensorflow2/tensorflow2_keras_mnist.py

DistributedOptimizer averages the gradients across ranks; the callbacks broadcast rank 0's
variables at the start, average the metrics across ranks at each epoch's end and warm the
learning rate up from one rank's to the scaled one over the first epochs. Works with Keras 3
(TensorFlow's default) and with tf-keras (TF_USE_LEGACY_KERAS=1).
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import horovod.tensorflow.keras as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist_data  # noqa: E402
from tensorflow2_mnist import model_fn, weights_digest  # noqa: E402

parser = argparse.ArgumentParser(description="TensorFlow 2 Keras Fashion-MNIST example on hvd")
parser.add_argument("--epochs", type=int, default=24)
parser.add_argument("--steps-per-epoch", type=int, default=500,
                    help="of the whole job (each rank runs this / size)")
parser.add_argument("--batch-size", type=int, default=128, help="per rank")
parser.add_argument("--lr", type=float, default=0.001, help="learning rate of one rank")
parser.add_argument("--warmup-epochs", type=int, default=3)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--data-dir", default=fashion_mnist_data.DEFAULT_DIR)
parser.add_argument("--train-limit", type=int, default=0, help="use only the first N images")


def main(argv=None):
    args = parser.parse_args(argv)
    hvd.init()
    tf.keras.utils.set_random_seed(args.seed)
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)

    images, labels = fashion_mnist_data.load(args.data_dir, "train", args.train_limit)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    dataset = dataset.repeat().shuffle(10000, seed=args.seed + hvd.rank()).batch(args.batch_size)

    model = model_fn()
    scaled_lr = args.lr * hvd.size()
    # Horovod: the optimizer averages the gradients across ranks
    opt = hvd.DistributedOptimizer(tf.optimizers.Adam(scaled_lr))
    model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt,
                  metrics=["accuracy"])

    callbacks = [
        # Horovod: every rank starts from rank 0's variables
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: the epoch's metrics are the average over the ranks
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: from one rank's learning rate to the scaled one over the first epochs
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs, verbose=1),
    ]
    steps = max(1, args.steps_per_epoch // hvd.size())
    history = model.fit(dataset, steps_per_epoch=steps, callbacks=callbacks, epochs=args.epochs,
                        verbose=2 if hvd.rank() == 0 else 0)
    digest = weights_digest(model)
    if hvd.rank() == 0:
        print(f"final loss {history.history['loss'][-1]:.6f} accuracy "
              f"{history.history['accuracy'][-1]:.4f} weights {digest} ranks {hvd.size()}",
              flush=True)
    return digest


if __name__ == "__main__":
    main()
