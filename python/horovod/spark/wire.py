"""The wire of horovod.spark's services: one TCP connection, authenticated both ways with the
job's secret, then frames that are encrypted and authenticated.

Why encrypted: the connections carry what an ssh session carries for horovodrun (a host's
rank specs, with horovodrun's own job secret among them, and the ranks' output), and the
Spark job's secret on the ranks' side; on a shared network nobody may read them. Python's
standard library has no block cipher, so the frames use SHAKE-256 as a keyed stream (a
keyed XOF is a pseudo-random function) and HMAC-SHA256 over the ciphertext (encrypt, then
MAC), with keys of their own for each connection.

Handshake (the side that accepted the connection is the server):
    server -> client   MAGIC, 16-byte server nonce
    client -> server   MAGIC, 16-byte client nonce, HMAC(secret, "C" | nonces)
    server -> client   HMAC(secret, "S" | nonces)
Each side has proven it holds the secret before the other sends anything else; the session
keys are HMAC(secret, "E" | nonces) and HMAC(secret, "M" | nonces).

Frame: length (u32 LE) | type (u8) | ciphertext | HMAC(mac key, direction | sequence |
length | type | ciphertext). The reader checks the length against its bound before it reads
(or allocates) the body; sequence numbers per direction stop replay and reordering.
"""
import errno
import hashlib
import hmac
import json
import os
import selectors
import socket
import struct
import threading
import time

MAGIC = b"HVDSPK1\n"
NONCE = 16
MAC = 32
HEADER = struct.Struct("<IB")
HANDSHAKE_TIMEOUT_S = 10.0
# The largest frame anyone reads: the pickled function and each rank's pickled result are one
# frame each (a model's weights fit); control messages are bounded far lower by their readers.
MAX_FRAME = 1 << 30
CONTROL_MAX = 1 << 20

# Message types. One table for every service, so that a message sent to the wrong service is
# recognised as such.
REGISTER, REGISTERED, REFUSED, RUN, DONE, ABORT, PING = 1, 2, 3, 4, 5, 6, 7
STREAM, STDIN, STDIN_EOF, STDOUT, STDERR, EXIT = 10, 11, 12, 13, 14, 15
AGENT_RUN, AGENT_OK, AGENT_ERR = 20, 21, 22
CODE_REQ, CODE, RESULT, ERROR, ACK = 30, 31, 32, 33, 34
HOSTS_REQ, HOSTS = 40, 41


class WireError(Exception):
    """The peer broke the protocol, failed authentication, went silent or went away."""


def _xor(data, key):
    n = len(data)
    if n == 0:
        return b""
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise WireError("the connection closed")
        got += k
    return bytes(buf)


class Channel:
    """An authenticated, encrypted connection. send() may be called from several threads;
    recv() from one thread at a time."""

    def __init__(self, sock, secret, server):
        self.sock = sock
        self._send_lock = threading.Lock()
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            if server:
                ns = os.urandom(NONCE)
                sock.sendall(MAGIC + ns)
                hello = _recv_exact(sock, len(MAGIC) + NONCE + MAC)
                if hello[:len(MAGIC)] != MAGIC:
                    raise WireError("the peer does not speak horovod.spark's protocol")
                nc = hello[len(MAGIC):len(MAGIC) + NONCE]
                want = hmac.new(secret, b"C" + ns + nc, hashlib.sha256).digest()
                if not hmac.compare_digest(hello[len(MAGIC) + NONCE:], want):
                    raise WireError("the peer does not hold this job's secret")
                sock.sendall(hmac.new(secret, b"S" + ns + nc, hashlib.sha256).digest())
            else:
                hello = _recv_exact(sock, len(MAGIC) + NONCE)
                if hello[:len(MAGIC)] != MAGIC:
                    raise WireError("the peer does not speak horovod.spark's protocol")
                ns = hello[len(MAGIC):]
                nc = os.urandom(NONCE)
                sock.sendall(MAGIC + nc + hmac.new(secret, b"C" + ns + nc, hashlib.sha256).digest())
                answer = _recv_exact(sock, MAC)
                want = hmac.new(secret, b"S" + ns + nc, hashlib.sha256).digest()
                if not hmac.compare_digest(answer, want):
                    raise WireError("the peer does not hold this job's secret")
        except (OSError, socket.timeout) as e:
            raise WireError(f"handshake failed: {e}") from None
        sock.settimeout(None)
        self._enc = hmac.new(secret, b"E" + ns + nc, hashlib.sha256).digest()
        self._mac = hmac.new(secret, b"M" + ns + nc, hashlib.sha256).digest()
        self._out_dir, self._in_dir = (b"s", b"c") if server else (b"c", b"s")
        self._out_seq = 0
        self._in_seq = 0

    def _stream(self, direction, seq, n):
        return hashlib.shake_256(self._enc + direction + struct.pack("<Q", seq)).digest(n)

    def send(self, kind, payload=b""):
        with self._send_lock:
            seq = self._out_seq
            self._out_seq += 1
            header = HEADER.pack(len(payload), kind)
            body = _xor(payload, self._stream(self._out_dir, seq, len(payload)))
            tag = hmac.new(self._mac, self._out_dir + struct.pack("<Q", seq) + header + body,
                           hashlib.sha256).digest()
            try:
                self.sock.sendall(header + body + tag)
            except OSError as e:
                raise WireError(f"cannot send: {e}") from None

    def send_json(self, kind, obj):
        self.send(kind, json.dumps(obj).encode())

    def recv(self, timeout=None, max_len=CONTROL_MAX):
        """(type, payload). WireError on a closed, silent (timeout seconds) or forged
        connection, or a frame longer than max_len."""
        self.sock.settimeout(timeout)
        try:
            header = _recv_exact(self.sock, HEADER.size)
            n, kind = HEADER.unpack(header)
            if n > max_len:
                raise WireError(f"a frame of {n} bytes, over the {max_len} this reader takes")
            body = _recv_exact(self.sock, n)
            tag = _recv_exact(self.sock, MAC)
        except socket.timeout:
            raise WireError(f"nothing received for {timeout:.0f} s") from None
        except OSError as e:
            raise WireError(f"cannot receive: {e}") from None
        seq = self._in_seq
        want = hmac.new(self._mac, self._in_dir + struct.pack("<Q", seq) + header + body,
                        hashlib.sha256).digest()
        if not hmac.compare_digest(tag, want):
            raise WireError("a frame failed authentication")
        self._in_seq += 1
        return kind, _xor(body, self._stream(self._in_dir, seq, n))

    def recv_json(self, timeout=None):
        kind, payload = self.recv(timeout)
        try:
            return kind, json.loads(payload) if payload else {}
        except ValueError:
            raise WireError("a control message that is not JSON") from None

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def tune(sock):
    """A peer that vanishes (its host cut off, no FIN) shows within about 15 s rather than
    TCP's minutes: keepalive probes on an idle connection, and a bound on unacknowledged
    data."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3),
                       ("TCP_USER_TIMEOUT", 15000), ("TCP_NODELAY", 1)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)


def connect_any(addresses, secret, timeout):
    """Connect to the first of addresses [(ip, port)] that answers (all tried at once), and
    authenticate. The Channel, or WireError saying what each address did."""
    deadline = time.monotonic() + timeout
    pending = {}
    errors = {}
    sel = selectors.DefaultSelector()
    for addr in addresses:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(tuple(addr))
        if err not in (0, errno.EINPROGRESS):
            errors[tuple(addr)] = os.strerror(err)
            s.close()
            continue
        pending[s] = tuple(addr)
        sel.register(s, selectors.EVENT_WRITE)
    try:
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in sel.select(left):
                s = key.fileobj
                addr = pending.pop(s)
                sel.unregister(s)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    errors[addr] = os.strerror(err)
                    s.close()
                    continue
                s.setblocking(True)
                tune(s)
                try:
                    ch = Channel(s, secret, server=False)
                except WireError as e:
                    errors[addr] = str(e)
                    s.close()
                    continue
                ch.peer = addr
                return ch
    finally:
        for s in pending:
            s.close()
        sel.close()
    for addr in pending.values():
        errors[addr] = f"no answer within {timeout:.0f} s"
    raise WireError("cannot reach the Horovod Spark driver: " +
                    "; ".join(f"{a[0]}:{a[1]}: {e}" for a, e in errors.items()))


def local_ipv4_addresses():
    """Every IPv4 address of this host's interfaces that are up, loopback last (a task on
    another host must not settle for its own loopback)."""
    import fcntl
    siocgifaddr = 0x8915
    found = []
    for _, name in socket.if_nameindex():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            req = struct.pack("256s", name.encode()[:15])
            ip = socket.inet_ntoa(fcntl.ioctl(s.fileno(), siocgifaddr, req)[20:24])
        except OSError:
            continue  # (no IPv4 address, or down)
        finally:
            s.close()
        if ip not in found:
            found.append(ip)
    return sorted(found, key=lambda ip: ip.startswith("127."))


def parse_addresses(text):
    """"ip:port,ip:port" -> [(ip, port)]"""
    out = []
    for item in text.split(","):
        ip, _, port = item.strip().rpartition(":")
        out.append((ip, int(port)))
    return out


def format_addresses(addresses):
    return ",".join(f"{ip}:{port}" for ip, port in addresses)
