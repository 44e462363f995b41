"""Whole TensorFlow jobs under the real horovodrun, driven from one pytest process: the first
source article's TensorFlow 2 example under `horovodrun --gloo` and plain horovodrun (the
same weights), the Keras example, a rank SIGKILLed mid-training (the others fail promptly
naming it), and a TensorFlow with a single inter-op thread whose ranks start their collectives
in different orders (the kernels are asynchronous: none holds the thread while it waits), and
an elastic job (hvd.elastic.run with TensorFlowKerasState) that loses a worker and ends with
the exact result.
HVD_BUILD_DIR names the build tree, HVD_TF_PYTHON the interpreter with TensorFlow."""
import os
import re
import signal
import sys
import textwrap
import time

from proctree import run_job

BUILD = os.environ.get("HVD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "tensorflow2")
PY = os.environ.get("HVD_TF_PYTHON", sys.executable)
HOROVODRUN = os.path.join(BUILD, "horovodrun")
DATA = "/usr/share/datasets/fashion-mnist"


def env():
    return dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), TF_CPP_MIN_LOG_LEVEL="2")


def digest_of(out):
    m = re.search(r"weights ([0-9a-f]{16})", out)
    assert m, out
    return m.group(1)


def test_first_article_example_same_weights_with_gloo_and_plain():
    args = [PY, os.path.join(EXAMPLES, "tensorflow2_mnist.py"), "--steps", "60",
            "--batch-size", "32", "--train-limit", "3000", "--data-dir", DATA]
    # the article's command line: -np 2 -H localhost:4 --gloo
    rc, gloo = run_job([HOROVODRUN, "-np", "2", "-H", "localhost:4", "--gloo"] + args, env(), 300)
    assert rc == 0, gloo
    rc, plain = run_job([HOROVODRUN, "-np", "2"] + args, env(), 300)
    assert rc == 0, plain
    assert "Step #0" in gloo and "ranks 2 steps 30" in gloo
    assert digest_of(gloo) == digest_of(plain)


def test_keras_example_trains():
    rc, out = run_job([HOROVODRUN, "-np", "2", PY, os.path.join(EXAMPLES, "tensorflow2_keras_mnist.py"),
                       "--epochs", "3", "--warmup-epochs", "2", "--steps-per-epoch", "40",
                       "--batch-size", "32", "--train-limit", "3000", "--data-dir", DATA],
                      env(), 300)
    assert rc == 0, out
    assert "finished gradual learning rate warmup" in out
    m = re.search(r"final loss ([0-9.]+) accuracy ([0-9.]+)", out)
    assert m, out
    assert float(m.group(2)) > 0.3, out  # better than chance after 60 steps


VICTIM = """
import os, signal, sys
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
w = tf.Variable(tf.ones([1000]))

@tf.function
def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
    tape = hvd.DistributedGradientTape(tape)
    g = tape.gradient(loss, [w])[0]
    w.assign_sub(0.001 * g)

for i in range(10000):
    if i == 20 and hvd.rank() == 1:
        {end}
    try:
        step()
    except tf.errors.UnknownError as e:
        print("rank", hvd.rank(), "failed at step", i, ":", " ".join(e.message.split()),
              flush=True)
        sys.exit(3)
"""


def test_rank_killed_mid_training_ends_the_job_naming_it(tmp_path):
    script = tmp_path / "victim.py"
    script.write_text(VICTIM.replace("{end}", "os.kill(os.getpid(), signal.SIGKILL)"))
    start = time.monotonic()
    rc, out = run_job([HOROVODRUN, "-np", "2", PY, str(script)], env(), 120)
    assert rc == 137, out  # the victim's SIGKILL, reported
    assert re.search(r"rank 1 \(host \S+\) was the first to fail: killed by signal 9", out), out
    assert time.monotonic() - start < 60, out


def test_rank_gone_is_named_by_the_others_tensorflow_error(tmp_path):
    # rank 1 leaves without hvd.shutdown (exit status 0: horovodrun kills no one); rank 0's
    # next step fails with TensorFlow's UnknownError (what elastic mode recovers from),
    # naming rank 1
    script = tmp_path / "leaver.py"
    script.write_text(VICTIM.replace("{end}", "os._exit(0)"))
    rc, out = run_job([HOROVODRUN, "-np", "2", PY, str(script)], env(), 120)
    assert rc == 3, out
    assert re.search(r"\[0\]<stdout>:rank 0 failed at step 2\d : .*rank 1", out), out


def test_one_inter_op_thread_and_collectives_in_different_orders(tmp_path):
    script = tmp_path / "orders.py"
    script.write_text(textwrap.dedent("""
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        import horovod.tensorflow as hvd
        hvd.init()
        first, second = ("a", "b") if hvd.rank() == 0 else ("b", "a")

        @tf.function
        def f(x):
            # Two independent allreduces; each rank's first ready one has the other's name
            # second. A kernel that held the only inter-op thread while it waited would keep
            # its rank from ever starting the other one: both would wait for ever.
            one = hvd.allreduce(x, name=first, op=hvd.Sum)
            two = hvd.allreduce(x * 2, name=second, op=hvd.Sum)
            return one, two

        for _ in range(3):
            one, two = f(tf.ones([4]))
        print("done", float(tf.reduce_sum(one)), float(tf.reduce_sum(two)), flush=True)
        """))
    rc, out = run_job([HOROVODRUN, "-np", "2", PY, str(script)], env(), 120)
    assert rc == 0, out
    # "a" and "b" each add one rank's x to the other's 2x
    assert "[0]<stdout>:done 12.0 12.0" in out and "[1]<stdout>:done 12.0 12.0" in out, out


def test_elastic_worker_killed_state_restored(tmp_path):
    # hosts 127.0.0.1 and .2 are distinct to the elastic driver (test_elastic.py's Job)
    from test_elastic import Job, expect_exact_completion
    steps = 150
    job = Job(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"],
              ["-np", "2", "--min-np", "1", PY, os.path.join(HERE, "jobs", "tf_elastic_worker.py"),
               "--steps", str(steps), "--commit-every", "5", "--sleep-ms", "20"],
              TF_CPP_MIN_LOG_LEVEL="2")
    job.wait_for(lambda out: out.count("<stdout>:commit ") >= 3, "three commits")
    os.kill(job.pid_of("127.0.0.2"), signal.SIGKILL)
    out = expect_exact_completion(job, steps)
    assert " size 1" in out, out  # went on without the victim, from the last commit
    assert "resets 1" in out, out
