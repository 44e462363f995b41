"""The Spark rsh: what horovodrun (and mpirun, for use_mpi=True) runs instead of ssh to reach
a host of a horovod.spark job.

    python -m horovod.spark.rsh HOST COMMAND...

HOST is a host hash. The agent waits for a connection on a port of its own, asks the driver
service to have HOST's Spark task (the first task of that host: its local rank 0) run COMMAND
and connect back to it, then relays: its stdin to the command, the command's stdout and stderr
to its own, and exits with the command's exit code, or 255 (as ssh does) when the task cannot
be reached or is lost. The driver's addresses and the job's secret come in the environment
(HVD_SPARK_DRIVER, HVD_SPARK_SECRET), never in arguments.
"""
import os
import socket
import sys
import threading
import time

from horovod.spark import wire
from horovod.spark.wire import WireError

# How long the task has to connect back once the driver sent it the command.
CONNECT_BACK_S = 30.0
CHUNK = 65536


def _fail(msg):
    sys.stderr.write(f"horovod.spark rsh: {msg}\n")
    sys.stderr.flush()
    os._exit(255)


def job_secret():
    text = os.environ.get("HVD_SPARK_SECRET")
    if not text:
        _fail("HVD_SPARK_SECRET is not set (this program is started by horovod.spark)")
    return bytes.fromhex(text)


def _accept_task(lsock, secret, token, deadline, who):
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _fail(f"{who} did not connect back within {CONNECT_BACK_S:.0f} s")
        lsock.settimeout(left)
        try:
            conn, _ = lsock.accept()
        except socket.timeout:
            continue
        wire.tune(conn)
        try:
            chan = wire.Channel(conn, secret, server=True)
            kind, data = chan.recv(timeout=wire.HANDSHAKE_TIMEOUT_S)
        except WireError:
            conn.close()
            continue  # (not the task: keep waiting for it)
        if kind == wire.STREAM and data == token.encode():
            return chan
        chan.close()


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _feed(chan):
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            chan.send(wire.STDIN, data)
        chan.send(wire.STDIN_EOF)
    except (OSError, WireError):
        pass


def main(argv):
    if len(argv) < 3:
        _fail("usage: python -m horovod.spark.rsh HOST COMMAND...")
    host, command = argv[1], " ".join(argv[2:])
    secret = job_secret()
    addresses = wire.parse_addresses(os.environ.get("HVD_SPARK_DRIVER", ""))
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("0.0.0.0", 0))
    lsock.listen(4)
    try:
        drv = wire.connect_any(addresses, secret, wire.HANDSHAKE_TIMEOUT_S)
        drv.send_json(wire.AGENT_RUN, {"host": host, "command": command,
                                       "port": lsock.getsockname()[1]})
        kind, msg = drv.recv_json(timeout=wire.HANDSHAKE_TIMEOUT_S)
    except WireError as e:
        _fail(f"host {host}: {e}")
    drv.close()
    if kind != wire.AGENT_OK:
        _fail(f"host {host}: {msg.get('reason', 'refused')}")
    who = f"Spark task {msg['index']} on host {msg['hostname']}"
    chan = _accept_task(lsock, secret, msg["token"], time.monotonic() + CONNECT_BACK_S, who)
    lsock.close()
    threading.Thread(target=_feed, args=(chan,), daemon=True).start()
    try:
        while True:
            kind, data = chan.recv(max_len=wire.CONTROL_MAX)
            if kind == wire.STDOUT:
                _write_all(1, data)
            elif kind == wire.STDERR:
                _write_all(2, data)
            elif kind == wire.EXIT:
                os._exit(int(data))
    except WireError as e:
        _fail(f"lost the connection to {who}: {e}")
    except OSError:
        os._exit(255)  # (our own stdout is gone: horovodrun ended)


if __name__ == "__main__":
    main(sys.argv)
