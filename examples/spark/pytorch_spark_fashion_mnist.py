"""Train the Quick start's CNN on Fashion-MNIST through horovod.spark.run: the ranks run in
Spark tasks, the executors being the hosts, and the same training code as under horovodrun
(examples/pytorch/pytorch_fashion_mnist.py) ends with the same weights digest at the same rank
count.

    PYSPARK_PYTHON=venv/bin/python venv/bin/python examples/spark/pytorch_spark_fashion_mnist.py \
        --num-proc 2 --master 'local[2]' [the example's flags: --epochs 1 --train-limit 6000 ...]

From a notebook, the same in two lines with the session it has:
    results = horovod.spark.run(pytorch_fashion_mnist.main, args=([],), num_proc=2)

The training module travels to the executors by value (cloudpickle), so they need only
horovod, torch and numpy, and the data at the same path (--data-dir).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
import pytorch_fashion_mnist  # noqa: E402 (the Quick start's training code)

import horovod.spark  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Other flags go to pytorch_fashion_mnist.py.")
    ap.add_argument("--num-proc", type=int, default=2, help="Horovod ranks (Spark tasks)")
    ap.add_argument("--master", default=None,
                    help="Spark master (default: the active session's, else local[num-proc])")
    args, example_flags = ap.parse_known_args()

    from pyspark import cloudpickle
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName("hvd-spark-fashion-mnist")
    if args.master or not SparkSession.getActiveSession():
        builder = builder.master(args.master or f"local[{args.num_proc}]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # the executors cannot import the example's module: it travels with the function
    cloudpickle.register_pickle_by_value(pytorch_fashion_mnist)

    results = horovod.spark.run(pytorch_fashion_mnist.main, args=(example_flags,),
                                num_proc=args.num_proc)
    digests = {r["weights_digest"] for r in results}
    assert len(digests) == 1, f"the ranks' weights differ: {results}"
    print(f"horovod.spark.run: {len(results)} ranks, test accuracy "
          f"{100 * results[0]['test_accuracy']:.2f}%, weights digest "
          f"{results[0]['weights_digest'][:16]}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
