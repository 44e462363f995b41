"""Train a small CNN with Horovod's TensorFlow 2 API, data-parallel: the example of Horovod's
own examples/tensorflow2/tensorflow2_mnist.py (the first source article runs it with
`horovodrun -np 2 -H localhost:4 --gloo python tensorflow2_mnist.py`), on Debian's
Fashion-MNIST instead of a download.

    horovodrun -np 2 -H localhost:4 --gloo /opt/hvd/venv-tf/bin/python \\
        examples/tensorflow2/tensorflow2_mnist.py

Each rank reads its own shuffle of the data; DistributedGradientTape averages the gradients
across ranks; after the first step rank 0's variables (model and optimizer) are broadcast so
that every rank goes on alike; the learning rate is scaled by the number of ranks and the
steps divided by it. At the end rank 0 prints the loss and a digest of the weights, the same
for the same number of ranks whatever the launcher.
"""
import argparse
import hashlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist_data  # noqa: E402

parser = argparse.ArgumentParser(description="TensorFlow 2 Fashion-MNIST example on hvd")
parser.add_argument("--steps", type=int, default=10000,
                    help="steps of the whole job (each rank runs steps / size)")
parser.add_argument("--batch-size", type=int, default=128, help="per rank")
parser.add_argument("--lr", type=float, default=0.001, help="learning rate of one rank")
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--data-dir", default=fashion_mnist_data.DEFAULT_DIR)
parser.add_argument("--train-limit", type=int, default=0, help="use only the first N images")
parser.add_argument("--checkpoint-dir", default="",
                    help="where rank 0 saves the model at the end (nothing saved by default)")


def model_fn():
    return tf.keras.Sequential([
        tf.keras.layers.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(32, [3, 3], activation="relu"),
        tf.keras.layers.Conv2D(64, [3, 3], activation="relu"),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])


def weights_digest(model):
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def main(argv=None):
    args = parser.parse_args(argv)
    hvd.init()
    tf.keras.utils.set_random_seed(args.seed)
    # one core's worth of threads per rank on a host shared by local_size ranks
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)

    images, labels = fashion_mnist_data.load(args.data_dir, "train", args.train_limit)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    dataset = dataset.repeat().shuffle(10000, seed=args.seed + hvd.rank()).batch(args.batch_size)

    model = model_fn()
    loss_fn = tf.losses.SparseCategoricalCrossentropy()
    # Horovod: the learning rate scales with the number of ranks (the batch does)
    opt = tf.optimizers.Adam(args.lr * hvd.size())

    @tf.function
    def training_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            probs = model(x, training=True)
            loss = loss_fn(y, probs)
        # Horovod: the tape averages the gradients across ranks
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # Horovod: after the first step (the optimizer's variables exist then), every rank
        # takes rank 0's variables
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    steps = max(1, args.steps // hvd.size())
    loss = None
    for batch, (x, y) in enumerate(dataset.take(steps)):
        loss = training_step(x, y, batch == 0)
        if batch % 100 == 0 and hvd.rank() == 0:
            print(f"Step #{batch}\tLoss: {float(loss):.6f}", flush=True)

    digest = weights_digest(model)
    if hvd.rank() == 0:
        print(f"final loss {float(loss):.6f} weights {digest} ranks {hvd.size()} steps {steps}",
              flush=True)
        if args.checkpoint_dir:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            model.save(os.path.join(args.checkpoint_dir, "model.keras"))
    return digest


if __name__ == "__main__":
    main()
