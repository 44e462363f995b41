"""torchrun for the test suite: one job's rendezvous on a port of its own.

torchrun --standalone always listens on port 29400, so two jobs running side by side (ctest -j)
would meet in one rendezvous store, and the first to end breaks the other's. This picks a free
port and runs `python -m torch.distributed.run --rdzv_backend c10d --rdzv_endpoint
127.0.0.1:<port>` with the rest of the command line. (--redirects 1 --tee 1: Debian's torchrun
1.13 fails at start under Python 3.11 with its default --redirects 0.)"""
import os
import socket
import sys
import uuid


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    args = [sys.executable, "-m", "torch.distributed.run", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--rdzv_id", uuid.uuid4().hex,
            "--redirects", "1", "--tee", "1"] + sys.argv[1:]
    os.execv(sys.executable, args)
