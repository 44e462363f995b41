"""A stranger on the ranks' same-host listeners (abstract unix sockets), for test_faults.sh (c).

    unix_stranger.py --until-pid PID NAME...     (NAME: the socket's name without the '@')

Until process PID is gone, connects to each NAME over and over and misbehaves in each of the
ways a process of another job, or another user, could: random bytes with file descriptors
attached (a memfd as big as a rank's rings, a pipe, /dev/null), a well-formed-looking HELLO
of random bytes with a memfd, descriptors alone, silence until the rank gives up, and an
immediate hang-up. A rank must drop each such connection without mapping what it was sent,
and the job must not notice. Prints how many connections of each kind got in, and exits 1 if
a listener never accepted one (then it tested nothing there).
"""
import argparse
import os
import random
import socket
import sys
import time

CHALLENGE_LEN = 4 + 2 + 2 + 16
HELLO_LEN = 4 + 2 + 2 + 4 + 4 + 4 + 16 + 32


def fds_to_send():
    """Open descriptors of several kinds; the caller closes them."""
    mem = os.memfd_create("stranger")
    os.ftruncate(mem, 2 << 20)
    r, w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    return [mem, r, w, null]


def misbehave(name, kind, rng):
    """One connection of this kind; True if the listener accepted it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(0.2)
    fds = []
    try:
        s.connect("\0" + name)
    except OSError:
        s.close()
        return False  # the rank was busy or gone: strangers do not get to complain
    try:
        if kind == "hangup":
            return True
        fds = fds_to_send()
        if kind == "random":
            socket.send_fds(s, [rng.randbytes(rng.randrange(1, 4096))], fds[: rng.randrange(1, 5)])
        elif kind == "hello":
            # read the rank's CHALLENGE (or whatever it sends), then answer with a HELLO-sized
            # message of random bytes and the memory a rank would bring
            try:
                s.recv(CHALLENGE_LEN)
            except OSError:
                pass
            socket.send_fds(s, [rng.randbytes(HELLO_LEN)], [fds[0]])
        elif kind == "fds":
            socket.send_fds(s, [b"\0"], fds)
        elif kind == "silent":
            time.sleep(0.2)
        # wait (briefly) for the rank to close the connection on us
        try:
            s.recv(4096)
        except OSError:
            pass
    except OSError:
        pass  # the rank closed on us mid-way: that is what it should do
    finally:
        for fd in fds:
            os.close(fd)
        s.close()
    return True


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--until-pid", type=int, required=True)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    rng = random.Random(os.getpid())
    # every kind in turn, those that bring descriptors first, so that each listener gets
    # each of them early in the job
    kinds = ["hello", "fds", "random", "hangup", "silent"]
    made = {k: 0 for k in kinds}
    got_in = {name: 0 for name in args.names}
    turn = 0
    while alive(args.until_pid):
        kind = kinds[turn % len(kinds)]
        for name in args.names:
            if misbehave(name, kind, rng):
                made[kind] += 1
                got_in[name] += 1
        turn += 1
        time.sleep(0.02)
    print("unix strangers:", " ".join(f"{k}={v}" for k, v in made.items()), flush=True)
    never = [name for name, n in got_in.items() if n == 0]
    if never:
        print("unix strangers: never accepted by", " ".join(never), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
