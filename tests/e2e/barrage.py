"""Attack a running job's listening ports (tests/e2e/test_port_barrage.sh drives it).

  barrage.py idle HOST:PORT... COUNT FILE   hold COUNT idle connections spread over the ports
                                            until FILE exists, then print how many the far
                                            side had closed
  barrage.py store HOST:PORT COUNT          COUNT bad requests to the rendezvous store
  barrage.py data HOST:PORT COUNT           COUNT bad handshakes to a rank's data port
  barrage.py service HOST:PORT COUNT        COUNT bad requests to a driver or task service
  barrage.py store-state HOST:PORT          the store kept nothing of the barrage, and a
                                            replayed signed request is refused

The job secret (hex) comes in the environment as BARRAGE_SECRET (read by the test from a
rank's /proc/<pid>/environ, as root), never on the command line. Every count is bounded and
every socket has a timeout, so the barrage itself cannot hang the test."""
import hashlib
import hmac
import os
import random
import secrets
import select
import socket
import sys
import time

TIMEOUT = 5.0
rng = random.Random(1234)


def addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def connect(a):
    s = socket.create_connection(a, timeout=TIMEOUT)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return s


NO_ANSWER = b"\0no-answer\0"  # a payload's prefix (not sent): close without reading


def send_and_close(a, payload):
    """One connection: send payload (what fits), read what comes back, close (with a reset).
    Returns the first bytes of the answer (b"" when the far side closed or reset, or when
    payload starts with NO_ANSWER)."""
    read = not payload.startswith(NO_ANSWER)
    payload = payload if read else payload[len(NO_ANSWER):]
    try:
        s = connect(a)
    except OSError as e:
        raise SystemExit(f"cannot connect to {a[0]}:{a[1]}: {e}")
    got = b""
    try:
        s.sendall(payload)
        if read:
            s.shutdown(socket.SHUT_WR)
            got = s.recv(256)
    except OSError:
        pass  # reset or closed by the far side: what a refusal looks like
    finally:
        s.close()
    return got


def sign(secret, method, target, body=b"", ts=None, nonce=None):
    ts = str(int(time.time() * 1000)) if ts is None else ts
    nonce = secrets.token_hex(16) if nonce is None else nonce
    msg = b"hvd-kv-v1\n" + "\n".join(
        [method, target, ts, nonce, hashlib.sha256(body).hexdigest()]).encode()
    mac = hmac.new(secret, msg, hashlib.sha256).hexdigest()
    return f"HVD1 ts={ts},nonce={nonce},mac={mac}"


def http(method, target, body=b"", auth=None, extra=""):
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head += f"Content-Length: {len(body)}\r\n"
    if auth:
        head += f"Authorization: {auth}\r\n"
    return (head + extra + "\r\n").encode() + body


def store_requests(secret):
    """Endless supply of bad requests, each kind in turn: malformed, truncated, oversized,
    unsigned, wrongly signed, stale, and signed for another request."""
    bad_secret = secrets.token_bytes(len(secret))
    kinds = [
        lambda i: NO_ANSWER + secrets.token_bytes(rng.randrange(1, 2048)),  # noise
        # (a request cut short and then closed: the server waits its 3 s for the rest unless
        # the connection is reset, so these are sent without waiting for an answer)
        lambda i: NO_ANSWER + b"GET /" + b"a" * rng.randrange(1, 20000) + b" HTTP/1.1\r\n",
        lambda i: NO_ANSWER + http("PUT", f"/barrage/k{i}", b"x" * 10)[: rng.randrange(5, 60)],
        lambda i: b"PUT /barrage/big HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",  # oversize
        lambda i: http("PUT", f"/barrage/k{i}", b"unsigned"),  # no Authorization
        lambda i: http("PUT", f"/barrage/k{i}", b"v", sign(bad_secret, "PUT", f"/barrage/k{i}", b"v")),
        lambda i: http("PUT", f"/barrage/k{i}", b"v", sign(secret, "PUT", f"/barrage/k{i}", b"v",
                                                           ts="1000")),  # stale
        lambda i: http("PUT", f"/barrage/k{i}", b"evil", sign(secret, "PUT", f"/barrage/k{i}", b"v")),
        lambda i: http("DELETE", "/global/0", b"", "HVD1 ts=1,nonce=zz,mac=00"),  # malformed auth
        lambda i: http("GET", "/../../etc/passwd", b"", sign(secret, "GET", "/../../etc/passwd")),
        lambda i: http("BREW", "/barrage/pot"),
        lambda i: NO_ANSWER + b"PUT /barrage/chunked HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
        b"\r\nfffffff\r\n" + b"y" * 4096,  # announces 256 MiB
    ]
    i = 0
    while True:
        yield kinds[i % len(kinds)](i)
        i += 1


def data_requests():
    """Bad handshakes for a rank's data port: noise, a wrong magic, truncated and forged
    HELLOs (right magic and version, a MAC made without the secret), and streams of junk."""
    def hello(magic=b"HVDH", version=1, tail=None):
        body = magic + version.to_bytes(2, "little") + b"\0\0" + (0).to_bytes(4, "little") + \
            (1).to_bytes(4, "little") + (0).to_bytes(4, "little") + secrets.token_bytes(16)
        return body + (secrets.token_bytes(32) if tail is None else tail)
    kinds = [
        lambda: secrets.token_bytes(rng.randrange(1, 200)),
        lambda: hello(magic=b"HVDX"),
        lambda: NO_ANSWER + hello()[: rng.randrange(1, 60)],
        lambda: hello(),  # forged MAC
        lambda: hello(version=999),
        lambda: b"HVDF" + secrets.token_bytes(12) + b"z" * 65536,  # a frame before any HELLO
    ]
    i = 0
    while True:
        yield kinds[i % len(kinds)]()
        i += 1


def service_requests():
    """Bad requests for the driver and task services (src/runner/service/service.h): noise, a wrong
    magic or version, a length over the limit, truncated heads, and well-formed requests whose
    MAC was made without the secret (unsigned, forged, out of sequence)."""
    def request(magic=b"HVDQ", version=1, rtype=16, seq=0, length=4, mac=None, body=b"AAAA"):
        head = magic + version.to_bytes(2, "little") + rtype.to_bytes(2, "little") + \
            seq.to_bytes(4, "little") + length.to_bytes(4, "little") + secrets.token_bytes(16)
        return head + (secrets.token_bytes(32) if mac is None else mac) + body
    kinds = [
        lambda: secrets.token_bytes(rng.randrange(1, 200)),
        lambda: request(magic=b"HVDX"),
        lambda: request(version=9),
        lambda: request(length=0x7FFFFFFF, body=b""),  # over the body limit
        lambda: NO_ANSWER + request()[: rng.randrange(1, 64)],
        lambda: request(mac=bytes(32)),  # unsigned
        lambda: request(rtype=1, length=0, body=b""),  # a PING with a forged MAC
        lambda: request(seq=5),  # out of sequence
    ]
    i = 0
    while True:
        yield kinds[i % len(kinds)]()
        i += 1


def cmd_flood_service(target, count):
    """Each request on a connection of its own; the service's challenge is the only thing a
    stranger may ever read back (a response, HVDR, would mean a bad request was served)."""
    refused = served = 0
    gen = service_requests()
    for _ in range(count):
        got = send_and_close(target, next(gen))
        if b"HVDR" in got:
            raise SystemExit(f"a bad request was answered: {got[:80]!r}")
        if got.startswith(b"HVDS"):
            served += 1
        else:
            refused += 1
    print(f"sent {count}: {served} challenged and dropped, {refused} closed before a challenge")


def cmd_idle(targets, count, stop_file):
    """Non-blocking connects, so that a port whose backlog is full (a rank's data port keeps
    only a few strangers waiting) does not stall the others."""
    socks = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(targets[i % len(targets)])
        socks.append(s)
    time.sleep(1)
    opened = sum(1 for s in socks if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
    deadline = time.time() + 120
    while not os.path.exists(stop_file) and time.time() < deadline:
        time.sleep(0.1)
    closed = 0
    for s in socks:
        try:
            if s.recv(4096) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    print(f"idle: {count} tried, {opened} connected, {closed} closed by the far side meanwhile")


def cmd_flood(target, count, gen):
    answers = {}
    for _ in range(count):
        got = send_and_close(target, next(gen))
        key = got.split(b"\r\n", 1)[0][:32] if got.startswith(b"HTTP/") else (got[:4] or b"none")
        answers[key] = answers.get(key, 0) + 1
    print(f"sent {count}: " + ", ".join(f"{k.decode(errors='replace')} x{v}"
                                        for k, v in sorted(answers.items())))
    # anything that looks like acceptance is a failure
    bad = [k for k in answers if k.startswith(b"HTTP/1.1 200") or k.startswith(b"HVDW")]
    if bad:
        raise SystemExit(f"a bad request was accepted: {bad}")


def cmd_flood_data(target, count):
    """A rank accepts connections only while it sets up its own (a stranger waits in the
    kernel's listen queue, costing the process nothing, and is challenged and dropped when the
    rank next accepts), so the handshakes are thrown without waiting: connect (1 ms at most on loopback:
    a full listen queue drops the SYN), send what fits, reset."""
    connected = 0
    gen = data_requests()
    for _ in range(count):
        payload = next(gen)
        payload = payload[len(NO_ANSWER):] if payload.startswith(NO_ANSWER) else payload
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.setblocking(False)
        s.connect_ex(target)
        if select.select([], [s], [], 0.001)[1] and \
                s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            connected += 1
            try:
                s.send(payload)
            except OSError:
                pass
        s.close()
    print(f"sent {count}: {connected} connected and sent, {count - connected} not taken "
          f"(listen queue full)")


def signed(target, secret, method, path, body=b""):
    return send_and_close(target, http(method, path, body, sign(secret, method, path, body)))


def cmd_store_state(target, secret):
    # nothing the barrage sent was stored
    for path in ("/barrage/k4", "/barrage/k5", "/barrage/k7", "/barrage/big", "/barrage/chunked"):
        got = signed(target, secret, "GET", path)
        if not got.startswith(b"HTTP/1.1 404"):
            raise SystemExit(f"GET {path} after the barrage: {got[:80]!r} (expected 404)")
    # a signed request works once; sent again byte for byte it is refused and changes nothing
    first = http("PUT", "/barrage/replay", b"A", sign(secret, "PUT", "/barrage/replay", b"A"))
    if not send_and_close(target, first).startswith(b"HTTP/1.1 200"):
        raise SystemExit("a correctly signed PUT was refused")
    if not signed(target, secret, "PUT", "/barrage/replay", b"B").startswith(b"HTTP/1.1 200"):
        raise SystemExit("a second correctly signed PUT was refused")
    replay = send_and_close(target, first)
    if not replay.startswith(b"HTTP/1.1 403"):
        raise SystemExit(f"a replayed PUT was answered {replay[:40]!r} (expected 403)")
    s = connect(target)
    s.sendall(http("GET", "/barrage/replay", b"", sign(secret, "GET", "/barrage/replay")))
    s.shutdown(socket.SHUT_WR)
    resp = b""
    while chunk := s.recv(4096):
        resp += chunk
    s.close()
    if not resp.startswith(b"HTTP/1.1 200") or not resp.endswith(b"\r\n\r\nB"):
        raise SystemExit(f"the replay changed the value: {resp[-60:]!r}")
    print("store state: nothing stored by the barrage; the replay refused and without effect")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    secret = bytes.fromhex(os.environ.get("BARRAGE_SECRET", "00"))
    what = sys.argv[1]
    if what == "idle":
        cmd_idle([addr(a) for a in sys.argv[2:-2]], int(sys.argv[-2]), sys.argv[-1])
    elif what == "store":
        cmd_flood(addr(sys.argv[2]), int(sys.argv[3]), store_requests(secret))
    elif what == "data":
        cmd_flood_data(addr(sys.argv[2]), int(sys.argv[3]))
    elif what == "service":
        cmd_flood_service(addr(sys.argv[2]), int(sys.argv[3]))
    elif what == "store-state":
        cmd_store_state(addr(sys.argv[2]), secret)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
