"""One rank of horovod.run: unpickle the function from the job's directory, call it, and
leave its return value there as result.<rank> (written whole, then renamed, so that a rank
that dies mid-write leaves no half result)."""
import os
import socket
import sys


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: python -m horovod.runner.run_task DIR (started by horovod.run)")
    work = argv[1]
    func_path = os.path.join(work, "func.pkl")
    if not os.path.isfile(func_path):
        sys.exit(f"horovod.run: {func_path} does not exist on host {socket.gethostname()}: "
                 "with remote hosts, set TMPDIR to a directory every host shares")
    import cloudpickle
    with open(func_path, "rb") as f:
        func = cloudpickle.load(f)
    result = func()
    rank = int(os.environ.get("HOROVOD_RANK", "0"))
    tmp = os.path.join(work, f".result.{rank}.{os.getpid()}")
    with open(tmp, "wb") as f:
        cloudpickle.dump(result, f)
    os.replace(tmp, os.path.join(work, f"result.{rank}"))


if __name__ == "__main__":
    main(sys.argv)
