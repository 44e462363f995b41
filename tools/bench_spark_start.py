"""What horovod.spark.run costs over horovodrun: the time from the call to every rank's first
allreduce done, and to the call's return, for the same function (import horovod.torch, init,
one allreduce, return), alternating the two launchers, REPEAT times each.

    PYSPARK_PYTHON=$(which python) PYTHONPATH=build/python \\
        python tools/bench_spark_start.py [--np 2 4] [--repeat 5] [--master local[4]]

The Spark session starts once, before any timing (a notebook has one already). Prints one
table row per launcher and rank count: median, min and max over the repeats, in seconds.
Whichever `horovod` the interpreter imports is measured: with Horovod 0.28.1's on the path
(shared/anchors/horovod) and --horovodrun naming its horovodrun, the same table for Horovod.
--controller mpi runs both launchers with MPI (use_mpi=True, horovodrun --mpi).
--example FLAGS... times the Quick start's training instead (examples/pytorch/
pytorch_fashion_mnist.py with FLAGS under horovodrun; its main() through horovod.spark.run, as
examples/spark/ runs it): the first column is then the same whole-call time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

RANK_SCRIPT = r"""
import json, os, sys, time
import horovod.torch as hvd, torch
hvd.init()
hvd.allreduce(torch.ones(1), name="first")
with open(os.path.join(sys.argv[1], "rank.%d" % hvd.rank()), "w") as f:
    json.dump(time.time(), f)
"""


def fn(out_dir):
    import horovod.torch as hvd
    import torch
    hvd.init()
    hvd.allreduce(torch.ones(1), name="first")
    return time.time()


def with_spark(np_, mpi):
    import horovod.spark
    t0 = time.time()
    stamps = horovod.spark.run(fn, args=(None,), num_proc=np_, verbose=0, use_mpi=mpi,
                               use_gloo=not mpi)
    return max(stamps) - t0, time.time() - t0


def with_horovodrun(np_, horovodrun, mpi):
    with tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        subprocess.run([horovodrun, "-np", str(np_), "--mpi" if mpi else "--gloo",
                        sys.executable, "-c", RANK_SCRIPT, d],
                       check=True, stdout=subprocess.DEVNULL)
        end = time.time()
        stamps = []
        for name in os.listdir(d):
            with open(os.path.join(d, name)) as f:
                stamps.append(json.load(f))
    return max(stamps) - t0, end - t0


def _example():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "examples", "pytorch"))
    import pytorch_fashion_mnist
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(pytorch_fashion_mnist)
    return pytorch_fashion_mnist


def example_with_spark(np_, flags):
    import horovod.spark
    t0 = time.time()
    horovod.spark.run(_example().main, args=(flags,), num_proc=np_, verbose=0)
    t = time.time() - t0
    return t, t


def example_with_horovodrun(np_, horovodrun, flags):
    t0 = time.time()
    subprocess.run([horovodrun, "-np", str(np_), sys.executable, _example().__file__] + flags,
                   check=True, stdout=subprocess.DEVNULL)
    t = time.time() - t0
    return t, t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--master", default="local[4]")
    ap.add_argument("--horovodrun", default=None,
                    help="the horovodrun to compare with (default: hvd's, beside the package)")
    ap.add_argument("--controller", choices=("gloo", "mpi"), default="gloo")
    ap.add_argument("--example", nargs=argparse.REMAINDER, default=None,
                    help="time the Quick start's training with these flags instead")
    a = ap.parse_args()
    mpi = a.controller == "mpi"
    from pyspark.sql import SparkSession
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(a.master).config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if a.horovodrun:
        horovodrun = a.horovodrun
    else:
        from horovod.runner import _horovodrun
        horovodrun = _horovodrun()
    with_spark(a.np[0], mpi)  # (warm: the first job of a session starts Python workers)
    if a.example is not None:
        run_hvd = lambda n: example_with_horovodrun(n, horovodrun, a.example)  # noqa: E731
        run_spark = lambda n: example_with_spark(n, a.example)  # noqa: E731
    else:
        run_hvd = lambda n: with_horovodrun(n, horovodrun, mpi)  # noqa: E731
        run_spark = lambda n: with_spark(n, mpi)  # noqa: E731
    rows = []
    for np_ in a.np:
        times = {"horovodrun": [], "horovod.spark.run": []}
        for _ in range(a.repeat):
            times["horovodrun"].append(run_hvd(np_))
            times["horovod.spark.run"].append(run_spark(np_))
        for name, ts in times.items():
            first = [t[0] for t in ts]
            whole = [t[1] for t in ts]
            rows.append((name, np_, first, whole))
    print(f"{'launcher':<18} {'np':>3}  {'to first allreduce (s)':>26}  {'whole call (s)':>26}")
    for name, np_, first, whole in rows:
        fmt = lambda v: f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"  # noqa: E731
        print(f"{name:<18} {np_:>3}  {fmt(first):>26}  {fmt(whole):>26}")
    spark.stop()


if __name__ == "__main__":
    main()
