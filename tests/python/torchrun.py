"""torchrun for the test suite: one job's rendezvous on a port of its own.

torchrun --standalone always listens on port 29400, so two jobs running side by side (ctest -j)
would meet in one rendezvous store, and the first to end breaks the other's. This picks a free
port and runs `python -m torch.distributed.run --rdzv_backend c10d --rdzv_endpoint
127.0.0.1:<port>` with the rest of the command line. (--redirects 1 --tee 1: Debian's torchrun
1.13 fails at start under Python 3.11 with its default --redirects 0.)

The port comes from just below the kernel's ephemeral range. torchrun's store binds it seconds
after this picks it (torchrun imports torch first), and a port the kernel hands out (a bind to
port 0) may by then be taken again: as the local port of another process's connection, or by
another test's listener. That happened in CI: the store failed to bind, and torchrun then
connected to the stranger's port and failed with "Connection reset by peer". Below the
ephemeral range only ports that programs ask for by number are taken, and no test does, so
the remaining risk is two of these picking one port at once (1 in 10,000 per pair)."""
import os
import random
import socket
import sys
import uuid

SPAN = 10000  # ports below the ephemeral range to pick from


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port():
    low = ephemeral_low()
    first = max(1024, low - SPAN)
    ports = list(range(first, low))
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"torchrun.py: no free port in {first}-{low - 1}")


if __name__ == "__main__":
    args = [sys.executable, "-m", "torch.distributed.run", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--rdzv_id", uuid.uuid4().hex,
            "--redirects", "1", "--tee", "1"] + sys.argv[1:]
    os.execv(sys.executable, args)
