"""horovod.spark.run and run_elastic: a Horovod job whose hosts are Spark's executors.

One call:
 1. starts the Spark driver service (driver_service.py) in this process, with a fresh secret;
 2. runs a Spark job of one task per rank (a barrier stage for run: all start together or none
    does; a plain stage of max_num_proc tasks for run_elastic, so that Spark starts a lost task
    again), each registering with the service (task_service.py);
 3. groups the tasks by host hash and runs hvd's horovodrun on those hosts with the Spark rsh
    (rsh.py) as its ssh: horovodrun's NIC discovery, rendezvous, launch, output tagging and
    kill-all, unchanged, with every host reached through its Spark task;
 4. each rank (exec_fn.py) fetches the pickled function, calls it and sends back its result
    or its exception; the results come back in rank order.
"""
import collections
import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from horovod.spark import wire
from horovod.spark.driver_service import SparkDriverService, format_rank_error
from horovod.spark.task_service import TaskSettings, run_task

log = logging.getLogger("horovod.spark")

_job_ids = itertools.count()
# After the job ends, how long the Spark job has to wind down before it is cancelled.
SPARK_WIND_DOWN_S = 30.0
CANCEL_WAIT_S = 5.0
# How long a failed job's cause may take to reach the driver service after horovodrun ended.
LOSS_SETTLE_S = 1.0
START_TIMEOUT_MESSAGE = (
    "Timed out waiting for {activity}. Please check that you have enough resources to run all "
    "Horovod processes. Each Horovod process runs in a Spark task. You may need to increase the "
    "start_timeout parameter to a larger value if your Spark resources are allocated on-demand.")


class TimeoutException(Exception):
    """A start-up deadline passed (Horovod's horovod.runner.common.util.timeout)."""


def _spark_context():
    import pyspark
    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        raise Exception("Could not find an active SparkContext, are you running in a PySpark "
                        "session?")
    return sc


def _start_timeout(start_timeout):
    if start_timeout is None:
        start_timeout = int(os.getenv("HOROVOD_SPARK_START_TIMEOUT", "600"))
    return start_timeout


def _num_proc(sc, num_proc, verbose):
    if num_proc is None:
        num_proc = sc.defaultParallelism
        if verbose >= 1:
            log.info("Running %d processes (inferred from spark.default.parallelism)...",
                     num_proc)
    elif verbose >= 1:
        log.info("Running %d processes...", num_proc)
    return num_proc


class _SparkJob:
    """The Spark job of the tasks, in a thread of its own (collect() blocks)."""

    def __init__(self, sc, n, settings, barrier):
        self.sc = sc
        self.group = f"horovod.spark.run.{next(_job_ids)}"
        self.error = None
        self._thread = threading.Thread(target=self._run, args=(n, settings, barrier),
                                        name="hvd-spark-job", daemon=True)
        self._thread.start()

    def _run(self, n, settings, barrier):
        def mapper(index, _):
            yield run_task(index, settings)

        try:
            self.sc.setJobGroup(self.group, "Horovod Spark Run", interruptOnCancel=True)
            rdd = self.sc.parallelize(range(n), n)
            if barrier:
                rdd = rdd.barrier()
            rdd.mapPartitionsWithIndex(mapper).collect()
        except Exception as e:  # noqa: BLE001 (reported by the runner)
            self.error = e

    def failed(self):
        """None, or why the Spark job failed: the Python exception of its first failed task
        when there is one (Spark wraps it in pages of Java stack)."""
        if self.error is None:
            return None
        lines = str(self.error).strip().splitlines()
        in_traceback = False
        for line in lines:
            if line.startswith("Traceback (most recent call last)") or \
                    line.endswith("Traceback (most recent call last):"):
                in_traceback = True
            elif in_traceback and line and not line[0].isspace():
                return line
        return lines[0] if lines else type(self.error).__name__

    def end(self, cancel, started):
        """Wait for the job's end (its tasks were told DONE or ABORT); cancel it first after a
        failure. A barrier job still waiting for enough slots (no task started) cannot be
        cancelled (Spark retries it unsubmitted), nor waited for: it is left to fail on its
        own, its tasks finding the driver service closed."""
        if cancel:
            self.sc.cancelJobGroup(self.group)
            if not started:
                return
        self._thread.join(CANCEL_WAIT_S if cancel else SPARK_WIND_DOWN_S)
        if self._thread.is_alive() and not cancel:
            self.sc.cancelJobGroup(self.group)
            self._thread.join(CANCEL_WAIT_S)


class _Horovodrun:
    """horovodrun as a child: its output copied line by line to the caller's streams (a
    notebook shows sys.stdout, not this process's file descriptors), the end of its stderr
    kept for the error message."""

    def __init__(self, argv, env, stdout, stderr):
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.tail = collections.deque(maxlen=40)
        self._copiers = [
            threading.Thread(target=self._copy, args=(self.proc.stdout, stdout, None),
                             daemon=True),
            threading.Thread(target=self._copy, args=(self.proc.stderr, stderr, self.tail),
                             daemon=True)]
        for t in self._copiers:
            t.start()

    @staticmethod
    def _copy(src, dst, tail):
        for raw in iter(src.readline, b""):
            line = raw.decode(errors="replace")
            if tail is not None:
                tail.append(line.rstrip("\n"))
            out = dst if dst is not None else (sys.stderr if tail is not None else sys.stdout)
            try:
                out.write(line)
                out.flush()
            except (OSError, ValueError):
                pass

    def terminate(self):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass

    def wait(self):
        code = self.proc.wait()
        for t in self._copiers:
            t.join()
        return code

    def error_lines(self):
        """horovodrun's own words about why the job failed: from its first line of its own
        (the rank's stderr it quotes follows), else the last lines."""
        lines = list(self.tail)
        own = [i for i, ln in enumerate(lines) if ln.startswith("horovodrun")]
        return "\n".join(lines[own[0]:] if own else lines[-6:])


def _horovodrun_argv(num_proc, start_timeout, verbose, nics, prefix_output_with_timestamp,
                     use_mpi, use_gloo, extra_mpi_args, executable):
    from horovod.runner import _horovodrun
    argv = [_horovodrun(), "-np", str(num_proc), "--start-timeout", str(max(start_timeout, 1)),
            "--internal-rsh-agent", f"{sys.executable} -m horovod.spark.rsh"]
    if verbose >= 2:
        argv.append("--verbose")
    if nics:
        argv += ["--network-interfaces", ",".join(sorted(nics))]
    if prefix_output_with_timestamp:
        argv.append("--prefix-output-with-timestamp")
    if use_mpi:
        argv.append("--mpi")
        if extra_mpi_args:
            argv += ["--mpi-args", extra_mpi_args]
    elif use_gloo:
        argv.append("--gloo")
    return argv


def _rank_command(executable):
    """Each rank runs exec_fn under `executable`, else the Python of its own Spark task
    (which the task puts in HVD_SPARK_PYTHON): executors need not have the driver's."""
    if executable:
        return [executable, "-m", "horovod.spark.exec_fn"]
    return ["/bin/sh", "-c", 'exec "$HVD_SPARK_PYTHON" -m horovod.spark.exec_fn']


def _job_env(driver, secret, env):
    job = dict(os.environ)
    job["HVD_SPARK_DRIVER"] = wire.format_addresses(driver.addresses)
    job["HVD_SPARK_SECRET"] = secret.hex()
    # (the ranks get env= through their tasks; HOROVOD_* also set horovodrun's behaviour)
    job.update({k: str(v) for k, v in (env or {}).items() if k.startswith("HOROVOD_")})
    return job


def _failure(driver, hrun, code):
    # (horovodrun may see a host's session end a moment before the driver sees that host's
    # task connection end: both are the same loss, and the task's is the first cause)
    deadline = time.monotonic() + LOSS_SETTLE_S
    while (driver.first_error() is None and driver.first_lost() is None
           and time.monotonic() < deadline):
        time.sleep(0.05)
    err = driver.first_error()
    if err is not None:
        return (f"{format_rank_error(err)}\n\nRemote traceback (rank {err.get('rank')}):\n"
                f"{err.get('traceback', '').rstrip()}")
    lost = driver.first_lost()
    words = hrun.error_lines()
    if lost is not None:
        task, why = lost
        return (f"{task.describe()} was lost while the job ran ({why})"
                + (f"\n{words}" if words else ""))
    return f"horovodrun exited with {code}" + (f":\n{words}" if words else "")


def _run(fn, args, kwargs, num_proc, start_timeout, env, stdout, stderr, verbose, elastic,
         horovodrun_args, executable, min_wait):
    from pyspark import cloudpickle  # (horovod/spark/pickle.py says why pyspark's)
    sc = _spark_context()
    start_timeout = _start_timeout(start_timeout)
    deadline = time.monotonic() + start_timeout
    secret = os.urandom(32)
    driver = SparkDriverService(num_proc, secret, cloudpickle.dumps((fn, args, kwargs)), env,
                                elastic=elastic)
    settings = TaskSettings(driver.addresses, secret, start_timeout, elastic)
    job = _SparkJob(sc, num_proc, settings, barrier=not elastic)
    hrun = None
    ok = False
    reason = None
    try:
        try:
            driver.wait_for_tasks(min_wait, deadline, job.failed)
        except TimeoutError as e:
            raise TimeoutException(
                START_TIMEOUT_MESSAGE.format(activity="Spark tasks to start") +
                f" ({e.args[0]} of {min_wait} tasks started within {start_timeout} s)") from None
        driver.start_running()
        argv = horovodrun_args(driver, max(1, int(deadline - time.monotonic())))
        argv += ["--"] + _rank_command(executable)
        hrun = _Horovodrun(argv, _job_env(driver, secret, env), stdout, stderr)
        driver.on_failure(lambda why: hrun.terminate())
        code = hrun.wait()
        if code != 0:
            reason = _failure(driver, hrun, code)
            raise RuntimeError(reason)
        results = driver.results(num_proc if not elastic else driver.result_count())
        ok = True
    except BaseException as e:
        if reason is None:
            reason = str(e) or type(e).__name__
        if hrun is not None:
            hrun.terminate()
            hrun.wait()
        raise
    finally:
        driver.finish(ok, reason)
        job.end(cancel=not ok, started=driver.any_registered())
        driver.close()
    return [None if r is None else cloudpickle.loads(r) for r in results]


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, use_mpi=None,
        use_gloo=None, extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1,
        nics=None, prefix_output_with_timestamp=False, executable=None):
    """Run fn(*args, **kwargs) on num_proc ranks, each in a Spark task, and return their
    return values in rank order (Horovod's horovod.spark.run).

    num_proc: defaults to spark.default.parallelism. start_timeout: seconds for the tasks to
    start, register and start fn (HOROVOD_SPARK_START_TIMEOUT, else 600). use_mpi/use_gloo:
    the controller (horovodrun's default otherwise). env: variables for the ranks, on top of
    their executors' environment. stdout/stderr: where the ranks' tagged output goes
    (sys.stdout/sys.stderr). nics: the interfaces to use (discovered when None). executable:
    the ranks' Python (their Spark task's when None).

    Raises RuntimeError naming the rank, its host and its exception (with the remote
    traceback) when fn raises, or the rank or task that was lost; TimeoutException when the
    tasks do not start in time (too few Spark slots)."""
    sc = _spark_context()
    num_proc = _num_proc(sc, num_proc, verbose)
    if nics and not isinstance(nics, (set, list, tuple)):
        raise ValueError(f"nics must be a list or set of interface names, not {nics!r}")
    if use_mpi and use_gloo:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")

    def horovodrun_args(driver, left):
        plan = driver.host_plan()
        argv = _horovodrun_argv(num_proc, left, verbose, nics, prefix_output_with_timestamp,
                                use_mpi, use_gloo, extra_mpi_args, executable)
        return argv + ["-H", ",".join(f"{h}:{len(ix)}" for h, ix in plan)]

    return _run(fn, args, kwargs, num_proc, start_timeout, env, stdout, stderr, verbose,
                elastic=False, horovodrun_args=horovodrun_args, executable=executable,
                min_wait=num_proc)


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_num_proc=None, max_num_proc=None,
                start_timeout=None, elastic_timeout=None, reset_limit=None, env=None,
                stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """Elastic Horovod on Spark (Horovod's horovod.spark.run_elastic): max_num_proc Spark
    tasks, each a host of its own; the job starts once num_proc have registered, loses the
    ranks of tasks that end (a lost executor) and takes in tasks that Spark starts again, down
    to min_num_proc. fn is expected to use hvd.elastic.run and a State. Returns the results of
    the ranks of the last round, in rank order. min_np and max_np are the deprecated
    spellings."""
    import warnings
    if min_np is not None:
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
        min_num_proc = min_np if min_num_proc is None else min_num_proc
    if max_np is not None:
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
        max_num_proc = max_np if max_num_proc is None else max_num_proc
    sc = _spark_context()
    num_proc = _num_proc(sc, num_proc, verbose)
    min_num_proc = num_proc if min_num_proc is None else min_num_proc
    max_num_proc = num_proc if max_num_proc is None else max_num_proc
    if not 1 <= min_num_proc <= num_proc <= max_num_proc:
        raise ValueError(f"run_elastic needs 1 <= min_num_proc ({min_num_proc}) <= num_proc "
                         f"({num_proc}) <= max_num_proc ({max_num_proc})")

    def horovodrun_args(driver, left):
        argv = _horovodrun_argv(num_proc, left, verbose, nics, prefix_output_with_timestamp,
                                False, True, None, None)
        argv += ["--min-np", str(min_num_proc), "--max-np", str(max_num_proc),
                 "--host-discovery-script", f"{sys.executable} -m horovod.spark.discover"]
        if elastic_timeout is not None:
            argv += ["--elastic-timeout", str(elastic_timeout)]
        if reset_limit is not None:
            argv += ["--reset-limit", str(reset_limit)]
        return argv

    return _run(fn, args, kwargs, max_num_proc, start_timeout, env, stdout, stderr, verbose,
                elastic=True, horovodrun_args=horovodrun_args, executable=None,
                min_wait=num_proc)
