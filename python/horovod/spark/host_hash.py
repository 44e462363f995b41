"""A name for this machine as seen from these kernel namespaces, the same as horovodrun's task
service computes (src/runner/discovery/host_hash.h): the short host name, '-', and the first 16
bytes, in hex, of SHA-256("<host name>-<namespace links, sorted by name, space-joined>[-<salt>]").
Spark tasks with the same host hash share a host: their ranks get one local_rank sequence and
talk through shared memory."""
import hashlib
import os
import socket


def host_hash(salt=None):
    name = socket.gethostname()
    links = []
    try:
        entries = sorted(os.listdir("/proc/self/ns"))
    except OSError:
        entries = []
    for entry in entries:
        try:
            links.append(os.readlink(os.path.join("/proc/self/ns", entry)))
        except OSError:
            pass
    text = f"{name}-{' '.join(links)}" + (f"-{salt}" if salt else "")
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f"{name.split('.')[0]}-{digest}"
