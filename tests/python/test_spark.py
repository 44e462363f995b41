"""horovod.spark.run on a real Spark (pyspark from PyPI): the results in rank order, the ranks'
environment and placement, and each failure the issue lists: fn raising on one rank, a rank's
process killed, a task's Python worker killed (its executor lost) with Spark retrying the
barrier stage, and too few slots. SPARK_MASTER picks the master (local[3,2] by default: three
slots, and a failed task tried twice, so that Spark does retry; local-cluster[2,1,1024] runs
every executor in a JVM of its own)."""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

pyspark = pytest.importorskip("pyspark")

import horovod.spark  # noqa: E402

MASTER = os.environ.get("SPARK_MASTER", "local[3,2]")

# The ranks cannot import this test module: its functions travel by value, as a notebook's do.
from pyspark import cloudpickle  # noqa: E402
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession
    # the executors' Python is this one (the default would be the python3 on PATH)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master(MASTER).appName("hvd-test-spark")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.executor.memory", "512m")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _no_job_processes_left(marker, within=10.0):
    """No process whose environment carries marker (a job's ranks, supervisors, task
    services) is left within `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for env in glob.glob("/proc/[0-9]*/environ"):
            try:
                with open(env, "rb") as f:
                    if marker.encode() in f.read():
                        left.append(env.split("/")[2])
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_no_spark_context():
    """(First in the file: the module's Spark session starts with the first test that uses it.)"""
    assert pyspark.SparkContext._active_spark_context is None
    with pytest.raises(Exception, match="Could not find an active SparkContext"):
        horovod.spark.run(_allreduce_fn, num_proc=1)


def _allreduce_fn(scale):
    import socket
    import horovod.torch as hvd
    import torch
    hvd.init()
    total = hvd.allreduce(torch.full((3,), float(hvd.rank() + 1)) * scale, op=hvd.Sum)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "sum": total.tolist(),
            "env": os.environ.get("HVD_TEST_VAR"), "cwd": os.getcwd(),
            "hostname": socket.gethostname(), "pid": os.getpid()}


def test_run_returns_results_in_rank_order(spark):
    results = horovod.spark.run(_allreduce_fn, args=(2.0,), num_proc=2,
                                env={"HVD_TEST_VAR": "from-env"})
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["size"] == 2
        assert r["sum"] == [6.0, 6.0, 6.0]  # (1 + 2) * 2
        assert r["env"] == "from-env"  # env= reaches the ranks
        assert r["pid"] != os.getpid()
    if MASTER.startswith("local["):  # one executor: one host, local ranks 0 and 1
        assert [(r["local_rank"], r["local_size"]) for r in results] == [(0, 2), (1, 2)]


def _marked_fn(tag_dir, how):
    """Leaves a file per call, then fails as `how` says on rank 1 (or kills rank 0's Spark
    task's Python worker for how == 'kill_task'), the other rank waiting to be ended. (No
    torch: what is tested is the launch and its failures, and an import of torch costs each
    rank 2 s of CPU.)"""
    rank = int(os.environ["HOROVOD_RANK"])
    with open(os.path.join(tag_dir, f"call.{rank}.{os.getpid()}"), "w"):
        pass
    deadline = time.monotonic() + 30
    while len(os.listdir(tag_dir)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # (both ranks called fn: the count the tests check means something)
    if how == "raise" and rank == 1:
        raise ValueError(f"boom on rank {rank}")
    if how == "kill_rank" and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "kill_task" and rank == 0:
        _kill_own_task()
    if how == "kill_executor" and rank == 0:
        _kill_own_task(executor=True)
    time.sleep(60)  # (ended by horovodrun)
    return rank


def _calls(tag_dir):
    return sorted(name.split(".")[1] for name in os.listdir(tag_dir))


def _failing_job(tmp_path, how):
    """Runs _marked_fn failing as `how` says; checks that run raised RuntimeError within 40 s
    and that nothing of the job is left on the host within 10 s more. The error's text."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        horovod.spark.run(_marked_fn, args=(str(tmp_path), how), num_proc=2,
                          env={"HVD_TEST_MARK": tmp_path.name})
    assert time.monotonic() - t0 < 40
    assert _no_job_processes_left(f"HVD_TEST_MARK={tmp_path.name}") == []
    return str(info.value)


def test_fn_raising_names_rank_type_message_and_traceback(spark, tmp_path):
    text = _failing_job(tmp_path, "raise")
    assert "rank 1 (host " in text
    assert "raised ValueError: boom on rank 1" in text
    assert "Remote traceback" in text and "_marked_fn" in text
    assert _calls(tmp_path) == ["0", "1"]  # fn ran once per rank


def test_rank_killed_fails_within_seconds(spark, tmp_path):
    text = _failing_job(tmp_path, "kill_rank")
    assert "rank 1 (host " in text and "signal 9" in text, text


def test_lost_task_fails_job_and_retry_does_not_rerun_fn(spark, tmp_path):
    text = _failing_job(tmp_path, "kill_task")
    assert "Spark task" in text and "(rank 0, host " in text, text
    assert "was lost while the job ran" in text, text
    # (Spark retried the barrier stage; the new attempts were refused: no second call)
    time.sleep(2)
    assert _calls(tmp_path) == ["0", "1"]


def test_lost_executor_fails_job_within_seconds(spark, tmp_path):
    """An executor's JVM killed mid-job (local-cluster only: a local master's executor is
    this test's own JVM): the job fails naming the lost task, its rank and host, and nothing
    of the job is left."""
    assert MASTER.startswith("local-cluster"), "needs executors in JVMs of their own"
    text = _failing_job(tmp_path, "kill_executor")
    assert "Spark task" in text and "(rank 0, host " in text, text
    assert _calls(tmp_path) == ["0", "1"]


def test_too_few_slots_times_out_with_horovods_message(spark):
    slots = spark.sparkContext.defaultParallelism
    t0 = time.monotonic()
    with pytest.raises(horovod.spark.TimeoutException) as info:
        horovod.spark.run(_allreduce_fn, args=(1.0,), num_proc=slots + 1, start_timeout=3)
    assert str(info.value).startswith(
        "Timed out waiting for Spark tasks to start. Please check that you have enough "
        "resources to run all Horovod processes.")
    assert time.monotonic() - t0 < 20
    # the next job runs
    assert horovod.spark.run(lambda: os.environ["HOROVOD_RANK"], num_proc=1) == ["0"]


def test_secret_is_not_in_any_argv(spark, tmp_path):
    """While a job runs, no process's command line holds the job's secret (every horovod.spark
    process gets it in its environment)."""
    def fn(out):
        if os.environ["HOROVOD_RANK"] == "0":
            secret = os.environ["HVD_SPARK_SECRET"]
            found = []
            for path in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    with open(path, "rb") as f:
                        if secret.encode() in f.read():
                            found.append(path)
                except OSError:
                    pass
            return found
        return []
    assert horovod.spark.run(fn, args=(str(tmp_path),), num_proc=2) == [[], []]


def _elastic_fn(tag_dir, steps_after_rejoin):
    """Trains with hvd.elastic; the first time rank 1 reaches step 20 of a 2-rank round, it
    kills its Spark task's Python worker (its executor lost). Rank 0 goes on alone from the
    last commit until Spark's retry of the task rejoins, then both run steps_after_rejoin more
    steps together."""
    import horovod.torch as hvd
    import torch
    hvd.init()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0, alone=0, together=0)
    killed = os.path.join(tag_dir, "killed")

    @hvd.elastic.run
    def train(state):
        deadline = time.monotonic() + 120
        while state.together < steps_after_rejoin and time.monotonic() < deadline:
            hvd.allreduce(torch.ones(1), name="step")
            state.step += 1
            if hvd.size() == 1:
                state.alone += 1
            elif state.alone:
                state.together += 1
            state.commit()
            if hvd.size() == 2 and hvd.rank() == 1 and state.step == 20 and \
                    not os.path.exists(killed):
                open(killed, "w").close()
                _kill_own_task()
            time.sleep(0.02)
        return {"size": hvd.size(), "step": state.step, "alone": state.alone,
                "together": state.together}

    return train(state)


def _kill_own_task(executor=False):
    """SIGKILL this rank's Spark task (the PySpark worker it runs in), or with executor=True
    the executor's JVM (local-cluster: a CoarseGrainedExecutorBackend of its own)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        if executor and b"CoarseGrainedExecutorBackend" in cmd:
            os.kill(pid, signal.SIGKILL)
            return
        if not executor and (b"pyspark.daemon" in cmd or b"pyspark/daemon" in cmd):
            os.kill(pid, signal.SIGKILL)
            return
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])


def test_run_elastic_survives_a_lost_task_and_takes_it_back(spark, tmp_path):
    results = horovod.spark.run_elastic(_elastic_fn, args=(str(tmp_path), 10), num_proc=2,
                                        min_num_proc=1, max_num_proc=2, start_timeout=60)
    assert os.path.exists(tmp_path / "killed")
    assert len(results) == 2, results
    for r in results:
        assert r["size"] == 2  # the lost task's retry came back
        assert r["alone"] > 0  # rank 0 trained alone meanwhile
        assert r["together"] >= 10
        assert r["step"] >= 20 + r["alone"]  # from the last commit on, no step lost


def test_example_trains_with_horovodruns_weights(spark, tmp_path):
    """examples/spark/ trains the Quick start's CNN through horovod.spark.run and ends with the
    weights digest horovodrun's run of the same script ends with, at the same rank count."""
    source = os.environ.get("HVD_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    sys.path.insert(0, os.path.join(source, "examples", "pytorch"))
    try:
        import pytorch_fashion_mnist as example
    finally:
        sys.path.pop(0)
    cloudpickle.register_pickle_by_value(example)
    flags = ["--epochs", "1", "--train-limit", "2000", "--test-limit", "500",
             "--num-threads", "1"]
    from horovod.runner import _horovodrun
    out = subprocess.run([_horovodrun(), "-np", "2", sys.executable, example.__file__] + flags,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    want = [ln for ln in out.stdout.splitlines() if "weights digest" in ln][0].split()[2]
    results = horovod.spark.run(example.main, args=(flags,), num_proc=2)
    assert [r["weights_digest"][:16] for r in results] == [want, want]
    assert results[0]["test_accuracy"] > 0.3  # (chance: 0.1)


def test_use_mpi_runs_the_ranks_under_mpirun_through_the_tasks(spark):
    """use_mpi=True: Open MPI's mpirun starts its daemons through the Spark rsh (its
    plm_rsh_agent), so the ranks run under orted in their Spark tasks' environment."""
    import shutil
    if not shutil.which("mpirun"):
        pytest.fail("no mpirun (scripts/install-deps.sh installs Open MPI)")

    def fn():
        return (int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"]),
                "HVD_SPARK_PYTHON" in os.environ, "HVD_TEST_VAR" in os.environ)
    assert horovod.spark.run(fn, num_proc=2, use_mpi=True, env={"HVD_TEST_VAR": "1"}) == \
        [(0, 2, True, True), (1, 2, True, True)]
