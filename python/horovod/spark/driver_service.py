"""The Spark driver service: runs in the user's process (the Spark driver) for one
horovod.spark.run or run_elastic call.

Like horovodrun's driver service it records every task: its index, its host hash, the host
hash's task indices (which tasks share a host, in index order), and its connection. Unlike it,
it also hands out the job: the pickled function to each rank, the command to each host's task
(for the rsh agent), and takes back each rank's result or error.

Every connection comes to this service (the tasks, the rsh agents, the ranks, the elastic
host discovery): executors need to reach the driver, as Spark's own do, and the driver never
needs to reach them. A task keeps its connection open for the whole job; the service pings
it, and a task whose connection ends is lost (its executor died, or its Python worker).
"""
import logging
import secrets
import socket
import threading
import time

from horovod.spark import wire
from horovod.spark.wire import WireError

PING_INTERVAL_S = 2.0
# How long a task waits for the driver's next word (pings come every PING_INTERVAL_S).
SILENCE_S = 30.0

log = logging.getLogger("horovod.spark")


class TaskInfo:
    def __init__(self, msg, chan):
        self.index = int(msg["index"])
        self.attempt = int(msg.get("attempt", 0))
        self.host_hash = str(msg["host_hash"])
        self.hostname = str(msg.get("hostname", "?"))
        self.pid = int(msg.get("pid", 0))
        self.chan = chan
        # the address of this service the task reached: where its rsh stream connects to
        self.driver_ip = chan.sock.getsockname()[0]
        self.alive = True
        self.rank = None  # (static runs: set when the job starts, host_plan's order)

    def describe(self):
        rank = "" if self.rank is None else f"rank {self.rank}, "
        return f"Spark task {self.index} ({rank}host {self.hostname}, pid {self.pid})"


class SparkDriverService:
    """elastic: tasks keep registering while the job runs (each is a host of its own, found
    through the host discovery request); otherwise the first registration of each of the
    num_proc indices counts, and any later one (a Spark retry) is refused."""

    def __init__(self, num_proc, secret, code, env, elastic=False):
        self.num_proc = num_proc
        self.secret = secret
        self.code = code
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.elastic = elastic
        self._cv = threading.Condition()
        self._tasks = {}  # index -> TaskInfo (the registered attempt)
        self._by_host = {}  # host hash -> [index] in index order (live tasks)
        self._phase = "registering"  # -> "running" -> "over"
        self._over_reason = None
        self._results = {}  # rank -> pickled result
        self._errors = []  # ranks' errors, first first
        self._lost = []  # (TaskInfo, why) lost while the job ran, first first
        self._failure_listeners = []
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("0.0.0.0", 0))
        self._lsock.listen(512)
        self.port = self._lsock.getsockname()[1]
        self.addresses = [(ip, self.port) for ip in wire.local_ipv4_addresses()]
        self._closed = False
        self._handshakes = threading.BoundedSemaphore(128)
        threading.Thread(target=self._accept_loop, name="hvd-spark-driver", daemon=True).start()
        threading.Thread(target=self._ping_loop, name="hvd-spark-ping", daemon=True).start()

    # ---- the network side ----------------------------------------------------------------

    def _accept_loop(self):
        while True:
            try:
                conn, _ = self._lsock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        wire.tune(conn)
        # (connections that have not authenticated yet are bounded: a flood of them costs
        # threads for HANDSHAKE_TIMEOUT_S each)
        if not self._handshakes.acquire(blocking=False):
            conn.close()
            return
        try:
            chan = wire.Channel(conn, self.secret, server=True)
            kind, msg = chan.recv_json(timeout=wire.HANDSHAKE_TIMEOUT_S)
        except WireError as e:
            log.debug("horovod.spark: refused a connection: %s", e)
            conn.close()
            return
        finally:
            self._handshakes.release()
        try:
            if kind == wire.REGISTER:
                self._register(chan, msg)
                return  # (the channel stays open; _watch_task owns it)
            if kind == wire.AGENT_RUN:
                self._agent_run(chan, msg)
            elif kind == wire.CODE_REQ:
                chan.send(wire.CODE, self.code)
            elif kind == wire.RESULT:
                self._result(chan, msg)
            elif kind == wire.ERROR:
                self._error(chan, msg)
            elif kind == wire.HOSTS_REQ:
                chan.send(wire.HOSTS, self._hosts_text().encode())
        except WireError as e:
            log.debug("horovod.spark: a connection ended early: %s", e)
        chan.close()

    def _register(self, chan, msg):
        task = TaskInfo(msg, chan)
        with self._cv:
            reason = None
            if self._phase == "over":
                reason = (f"the Horovod job this task belongs to is over ({self._over_reason}); "
                          f"a retried Spark task does not run the function again")
            elif self._phase == "running" and not self.elastic:
                reason = ("the Horovod job this task belongs to already runs; a retried Spark "
                          "task does not run the function again")
            elif not 0 <= task.index < (self.num_proc if not self.elastic else 1 << 30):
                reason = f"task index {task.index} is not one of this job's 0..{self.num_proc - 1}"
            else:
                old = self._tasks.get(task.index)
                if old is not None and old.alive and old.attempt >= task.attempt:
                    reason = f"task index {task.index} is already registered"
            if reason is None:
                if old is not None and old.alive:
                    self._drop(old)
                self._tasks[task.index] = task
                self._by_host.setdefault(task.host_hash, []).append(task.index)
                self._by_host[task.host_hash].sort()
                self._cv.notify_all()
        if reason is not None:
            try:
                chan.send_json(wire.REFUSED, {"reason": reason})
            except WireError:
                pass
            chan.close()
            return
        try:
            chan.send_json(wire.REGISTERED, {})
        except WireError:
            pass
        threading.Thread(target=self._watch_task, args=(task,), daemon=True).start()

    def _drop(self, task):
        """Forget a task (called with the lock held)."""
        task.alive = False
        indices = self._by_host.get(task.host_hash, [])
        if task.index in indices:
            indices.remove(task.index)
        if not indices:
            self._by_host.pop(task.host_hash, None)

    def _watch_task(self, task):
        """The task sends nothing after registering: reading its connection tells when it
        ends."""
        try:
            while True:
                task.chan.recv()
        except WireError as e:
            why = str(e)
        with self._cv:
            if not task.alive:
                return
            self._drop(task)
            running = self._phase == "running"
            if running:
                self._lost.append((task, why))
            self._cv.notify_all()
        if running:
            log.debug("horovod.spark: %s lost: %s", task.describe(), why)
            if not self.elastic:
                self._notify_failure(f"{task.describe()} was lost while the job ran "
                                     f"(its executor or Python worker ended: {why})")

    def _ping_loop(self):
        while not self._closed:
            time.sleep(PING_INTERVAL_S)
            with self._cv:
                live = [t for t in self._tasks.values() if t.alive]
            for t in live:
                try:
                    t.chan.send(wire.PING)
                except WireError:
                    pass  # (_watch_task sees it end)

    def _agent_run(self, chan, msg):
        host = str(msg["host"])
        with self._cv:
            indices = self._by_host.get(host)
            task = self._tasks[indices[0]] if indices else None
        if task is None:
            chan.send_json(wire.AGENT_ERR, {"reason": f"no live Spark task on host {host}"})
            return
        token = secrets.token_hex(16)
        try:
            task.chan.send_json(wire.RUN, {"command": msg["command"], "env": self.env,
                                           "agent": [task.driver_ip, int(msg["port"])],
                                           "token": token})
        except WireError as e:
            chan.send_json(wire.AGENT_ERR, {"reason": f"{task.describe()} is gone: {e}"})
            return
        chan.send_json(wire.AGENT_OK, {"token": token, "index": task.index,
                                       "hostname": task.hostname})

    def _result(self, chan, msg):
        """The header {rank}, then the pickled result as a frame of its own."""
        _, payload = chan.recv(timeout=wire.HANDSHAKE_TIMEOUT_S, max_len=wire.MAX_FRAME)
        with self._cv:
            self._results[int(msg["rank"])] = payload
        chan.send(wire.ACK)

    def _error(self, chan, msg):
        with self._cv:
            self._errors.append(msg)
        chan.send(wire.ACK)
        if not self.elastic:  # (an elastic job carries on without the rank)
            self._notify_failure(format_rank_error(msg))

    def _hosts_text(self):
        with self._cv:
            return "".join(f"{h}:{len(ix)}\n" for h, ix in self._by_host.items() if ix)

    # ---- the runner's side ---------------------------------------------------------------

    def on_failure(self, callback):
        """callback(reason) when a rank raises or (static runs) a task is lost."""
        self._failure_listeners.append(callback)

    def _notify_failure(self, reason):
        for cb in list(self._failure_listeners):
            cb(reason)

    def wait_for_tasks(self, count, deadline, spark_failed):
        """Block until count tasks have registered. spark_failed() returns the Spark job's
        error once it failed. TimeoutError or RuntimeError (the Spark job failed)."""
        with self._cv:
            while len([t for t in self._tasks.values() if t.alive]) < count:
                err = spark_failed()
                if err is not None:
                    raise RuntimeError(f"the Spark job failed before all tasks started: {err}")
                left = deadline - time.monotonic()
                if left <= 0:
                    have = len([t for t in self._tasks.values() if t.alive])
                    raise TimeoutError(have)
                self._cv.wait(min(left, 0.5))

    def start_running(self):
        with self._cv:
            self._phase = "running"

    def host_plan(self):
        """[(host hash, [task index...])], the host of task 0 first and the others sorted
        (as Horovod orders them): rank r is the r-th task in this order, which each task
        learns for the messages that name it."""
        with self._cv:
            hosts = sorted((h, list(ix)) for h, ix in self._by_host.items())
            first = [i for i, (_, ix) in enumerate(hosts) if 0 in ix]
            k = first[0] if first else 0
            plan = hosts[k:] + hosts[:k]
            for rank, index in enumerate(i for _, ix in plan for i in ix):
                self._tasks[index].rank = rank
        return plan

    def results(self, count):
        with self._cv:
            return [self._results.get(r) for r in range(count)]

    def any_registered(self):
        with self._cv:
            return bool(self._tasks)

    def result_count(self):
        """One more than the highest rank that sent a result (elastic: the last round's)."""
        with self._cv:
            return max(self._results) + 1 if self._results else 0

    def first_error(self):
        with self._cv:
            return self._errors[0] if self._errors else None

    def first_lost(self):
        with self._cv:
            return self._lost[0] if self._lost else None

    def finish(self, ok, reason=None):
        """Tell every live task the job is over (DONE, or ABORT with the reason), refuse
        later registrations, and stop listening."""
        with self._cv:
            self._phase = "over"
            self._over_reason = "it finished" if ok else (reason or "it failed")
            live = [t for t in self._tasks.values() if t.alive]
        for t in live:
            try:
                if ok:
                    t.chan.send(wire.DONE)
                else:
                    t.chan.send_json(wire.ABORT, {"reason": reason or "the job failed"})
            except WireError:
                pass

    def close(self):
        self._closed = True
        try:
            self._lsock.close()
        except OSError:
            pass
        with self._cv:
            tasks = list(self._tasks.values())
        for t in tasks:
            t.chan.close()


def format_rank_error(msg):
    return (f"rank {msg.get('rank')} (host {msg.get('host')}) raised {msg.get('type')}: "
            f"{msg.get('message')}")
