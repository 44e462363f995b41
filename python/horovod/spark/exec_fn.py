"""One rank of a horovod.spark job: what horovodrun starts on each rank's host, in that host's
Spark task's environment.

    python -m horovod.spark.exec_fn

Fetches the pickled (fn, args, kwargs) from the driver service, calls fn, and sends back its
result, or, when fn raises, the exception's type, message and traceback (and then fails, so
that horovodrun ends the job). The driver's addresses and the job's secret come in the
environment (HVD_SPARK_DRIVER, HVD_SPARK_SECRET).
"""
import os
import socket
import sys
import traceback

from horovod.spark import wire

CONNECT_S = 30.0


def _connect():
    secret = bytes.fromhex(os.environ["HVD_SPARK_SECRET"])
    return wire.connect_any(wire.parse_addresses(os.environ["HVD_SPARK_DRIVER"]), secret,
                            CONNECT_S)


def _final_rank(rank):
    """The rank after elastic resets may differ from the one the job started with."""
    hvd = sys.modules.get("horovod.torch")
    try:
        if hvd is not None and hvd.is_initialized():
            return hvd.rank()
    except Exception:  # noqa: BLE001 (no live context: the launch-time rank)
        pass
    return rank


def _report(rank, e, prefix=""):
    """The exception, its type and the traceback to the driver, which raises them there."""
    kind = type(e)
    chan = _connect()
    chan.send_json(wire.ERROR, {
        "rank": rank, "host": socket.gethostname(),
        "type": kind.__name__ if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}",
        "message": prefix + str(e), "traceback": traceback.format_exc()})
    chan.recv(timeout=CONNECT_S)
    chan.close()


def _launch_rank():
    """The rank horovodrun gave this process, or mpirun (use_mpi=True)."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def main():
    rank = _launch_rank()
    chan = _connect()
    chan.send_json(wire.CODE_REQ, {"rank": rank})
    kind, code = chan.recv(timeout=CONNECT_S, max_len=wire.MAX_FRAME)
    chan.close()
    if kind != wire.CODE:
        sys.exit(f"horovod.spark: rank {rank}: the driver sent no function")
    from horovod.spark.pickle import cloudpickle_module
    try:
        with cloudpickle_module() as cloudpickle:
            fn, args, kwargs = cloudpickle.loads(code)
    except Exception as e:  # noqa: BLE001
        _report(rank, e, "cannot load the function here (is every module it uses importable "
                         "on the executors?): ")
        raise
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 (every failure goes back to the driver)
        if isinstance(e, SystemExit) and not e.code:
            result = None
        else:
            _report(rank, e)
            raise
    with cloudpickle_module() as cloudpickle:
        payload = cloudpickle.dumps(result)
    chan = _connect()
    chan.send_json(wire.RESULT, {"rank": _final_rank(rank)})
    chan.send(wire.RESULT, payload)
    chan.recv(timeout=CONNECT_S)
    chan.close()


if __name__ == "__main__":
    main()
