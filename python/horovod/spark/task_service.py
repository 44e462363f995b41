"""The Spark task's side: what each task of horovod.spark's Spark stage runs, in the
executor's Python worker.

The task registers with the driver service (its index, its host hash, its host) and keeps the
connection open. When horovodrun reaches the task's host through the rsh agent, the driver
sends the task RUN: the command (horovodrun's task service, or a host's rank supervisor) with
the job's environment and where the agent waits; the task starts the command, connects to the
agent, and relays the command's stdin, stdout, stderr and exit code over that connection: the
agent is ssh's stand-in and the task is sshd's. DONE ends the task; ABORT or a lost driver
kills the command and fails the task.

The command runs in this task's environment (the Spark worker's: PYTHONPATH, JAVA_HOME,
HADOOP_*...) with the job's env= on top, in the task's working directory, as Horovod's Spark
task service runs it.
"""
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from horovod.spark import wire
from horovod.spark.driver_service import SILENCE_S
from horovod.spark.host_hash import host_hash
from horovod.spark.wire import WireError

# After SIGTERM, how long a command's process group has before SIGKILL.
KILL_GRACE_S = 5.0
# Elastic: how long a task whose ranks ended waits for the job's DONE before it fails (so that
# Spark starts it again as a new host). Pings come every 2 s, so it fails within 5-7 s.
ELASTIC_DONE_GRACE_S = 5.0
CHUNK = 65536


class TaskSettings:
    """What every task needs, shipped in the Spark closure (so over Spark's RPC, which
    Spark encrypts when spark.network.crypto.enabled is set; never in an argument or the
    Spark UI)."""

    def __init__(self, addresses, secret, start_timeout, elastic):
        self.addresses = addresses
        self.secret = secret
        self.start_timeout = start_timeout
        self.elastic = elastic


def _local_horovodrun():
    from horovod.runner import _horovodrun
    return _horovodrun()


def command_argv(command):
    """The argv to run for an agent's command line. horovodrun's own commands ("'<path to
    horovodrun>' --internal-...") run directly, with this host's horovodrun where the driver's
    path does not exist here (executors may have the package elsewhere); anything else (an
    mpirun daemon's command line) through /bin/sh -c, as sshd would."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    if len(words) == 2 and words[1].startswith("--internal-"):
        if not os.access(words[0], os.X_OK):
            words[0] = _local_horovodrun()
        return words
    return ["/bin/sh", "-c", command]


class Command:
    """One command started for the rsh agent, its stdio relayed over a connection to it."""

    def __init__(self, msg, secret):
        self.msg = msg
        self.secret = secret
        self.argv = command_argv(msg["command"])
        # a host's rank supervisor (horovodrun --internal-exec), not its discovery task service
        self.supervises_ranks = self.argv[1:2] == ["--internal-exec"]
        self.proc = None
        self.exit_code = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()

    def _run(self):
        try:
            self._relay()
        finally:
            self.done.set()

    def _relay(self):
        ip, port = self.msg["agent"]
        try:
            chan = wire.connect_any([(ip, int(port))], self.secret, wire.HANDSHAKE_TIMEOUT_S)
            chan.send(wire.STREAM, self.msg["token"].encode())
        except WireError as e:
            sys.stderr.write(f"horovod.spark: cannot reach the rsh agent at {ip}:{port}: {e}\n")
            self.exit_code = 255
            return
        env = dict(os.environ)
        env.update(self.msg.get("env", {}))
        env["HVD_SPARK_PYTHON"] = sys.executable
        env["HOROVOD_SPARK_WORK_DIR"] = os.getcwd()
        try:
            self.proc = subprocess.Popen(self.argv, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            try:
                chan.send(wire.STDERR, f"horovod.spark: cannot start {self.msg['command']}: "
                                       f"{e}\n".encode())
                chan.send(wire.EXIT, b"127")
            except WireError:
                pass
            chan.close()
            self.exit_code = 127
            return
        pumps = [threading.Thread(target=_pump, args=(self.proc.stdout, chan, wire.STDOUT),
                                  daemon=True),
                 threading.Thread(target=_pump, args=(self.proc.stderr, chan, wire.STDERR),
                                  daemon=True)]
        for p in pumps:
            p.start()
        threading.Thread(target=self._feed_stdin, args=(chan,), daemon=True).start()
        code = self.proc.wait()
        for p in pumps:
            p.join()
        self.exit_code = code if code >= 0 else 128 - code
        try:
            chan.send(wire.EXIT, str(self.exit_code).encode())
        except WireError:
            pass
        chan.close()

    def _feed_stdin(self, chan):
        """The agent's stdin to the command's; the agent gone ends the command."""
        stdin = self.proc.stdin
        try:
            while True:
                kind, data = chan.recv(max_len=wire.CONTROL_MAX)
                if kind == wire.STDIN:
                    stdin.write(data)
                    stdin.flush()
                elif kind == wire.STDIN_EOF:
                    break
        except (WireError, OSError):
            self.kill()
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def kill(self):
        """SIGTERM to the command's process group, SIGKILL after KILL_GRACE_S."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        except OSError:
            pass


def _pump(stream, chan, kind):
    fd = stream.fileno()
    while True:
        try:
            data = os.read(fd, CHUNK)
        except OSError:
            break
        if not data:
            break
        try:
            chan.send(kind, data)
        except WireError:
            break  # (the agent is gone: _feed_stdin ends the command)


def run_task(index, settings):
    """The body of Spark task `index`. Returns when the driver says the job is done; raises
    when it aborts the job, refuses this task (a retry of a job already under way), or is
    lost."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    # (Spark numbers task attempts across the application: a retry's is higher)
    attempt = ctx.taskAttemptId() if ctx else 0
    # Elastic: every attempt of every task is a host of its own (as in Horovod), so that a
    # task Spark starts again joins as a new host rather than one horovodrun has blacklisted.
    salt = f"{index}-{attempt}-{time.time()}" if settings.elastic else None
    try:
        chan = wire.connect_any(settings.addresses, settings.secret, settings.start_timeout)
    except WireError as e:
        raise RuntimeError(f"horovod.spark: task {index}: {e}") from None
    import socket
    chan.send_json(wire.REGISTER, {"index": index, "attempt": attempt, "host_hash": host_hash(salt),
                                   "hostname": socket.gethostname(), "pid": os.getpid()})
    command = None
    ranks_ended = None  # (elastic) when this attempt's ranks ended
    try:
        kind, msg = chan.recv_json(timeout=SILENCE_S)
        if kind == wire.REFUSED:
            raise RuntimeError(f"horovod.spark: task {index} refused: {msg.get('reason')}")
        while True:
            kind, msg = chan.recv_json(timeout=SILENCE_S)
            if kind == wire.RUN:
                command = Command(msg, settings.secret)
                command.start()
            elif kind == wire.DONE:
                break
            elif kind == wire.ABORT:
                raise RuntimeError(f"horovod.spark: the job failed: {msg.get('reason')}")
            if settings.elastic and command is not None and command.supervises_ranks and \
                    command.done.is_set():
                # This host's ranks ended. Unless the job is over (DONE follows at once), its
                # worker failed or was dropped, and horovodrun will not use this host again:
                # failing the task makes Spark start it again, as a new host (Horovod's way).
                ranks_ended = ranks_ended or time.monotonic()
                if time.monotonic() - ranks_ended > ELASTIC_DONE_GRACE_S:
                    raise RuntimeError(f"horovod.spark: task {index}: its ranks ended (exit "
                                       f"{command.exit_code}) and the job goes on: starting "
                                       f"again as a new host")
    except WireError as e:
        raise RuntimeError(f"horovod.spark: task {index} lost the driver at "
                           f"{chan.peer[0]}:{chan.peer[1]}: {e}") from None
    finally:
        if command is not None:
            command.kill()
        chan.close()
    return index
