"""Which attempt of a torchrun job this is, agreed by every rank through the c10d store.

torchrun 2 hands its workers one store (its agent's) for every rendezvous round of a job and
puts no prefix per round in it, so the keys a failed attempt wrote are still there when the
restarted workers meet: a restarted rank could read the dead attempt's secret and addresses
before their new owners overwrite them, and fail to connect. The restart count
(TORCHELASTIC_RESTART_COUNT) cannot tell the attempts apart across hosts: an agent that
restarts its workers because another host's agent re-joined the rendezvous does not count a
restart, so two hosts can start the same attempt with different counts.

So the ranks agree on a token of their own, fresh to the attempt, which prefixes every hvd key
of it. Nothing in the store can tell a fresh value from a stale one by itself; a value that
only this process can know can: every rank writes a random nonce, rank 0 (the leader) answers
each rank with "<token>:<the nonce it read>", and a rank takes the token only from an answer
that carries its own nonce, which proves rank 0 of this attempt wrote it. Rank 0 may first
read a dead attempt's nonce; it reads again until every rank has taken the token (a counter
under the token's own, fresh, key). Only set, get, wait and add are used: torch 1.13's stores
have nothing else.
"""
import datetime
import os
import time

_PREFIX = "hvd.attempt"
_POLL_FIRST_S, _POLL_MAX_S = 0.002, 0.05


def agree(store, rank, size, timeout_s):
    """The token of this attempt (16 hex digits), the same on every rank of it. Raises
    TimeoutError naming the rank waited for when timeout_s passes first."""
    deadline = time.monotonic() + timeout_s
    if size == 1:
        return os.urandom(8).hex()
    if rank == 0:
        return _lead(store, size, deadline)
    return _follow(store, rank, deadline)


def _wait(store, key, deadline, who):
    left = deadline - time.monotonic()
    try:
        if left <= 0:
            raise RuntimeError("timeout")
        store.wait([key], datetime.timedelta(seconds=left))
    except RuntimeError as e:
        if time.monotonic() < deadline and "timeout" not in str(e).lower():
            raise  # the store itself failed: its own words
        raise TimeoutError(f"hvd backend: {who} after the rendezvous deadline ({key} never "
                           "appeared in the store; raise init_process_group's timeout if ranks "
                           "are slow to start)") from None


def _pause(poll, deadline, who):
    if time.monotonic() + poll > deadline:
        raise TimeoutError(f"hvd backend: {who} after the rendezvous deadline")
    time.sleep(poll)
    return min(poll * 2, _POLL_MAX_S)


def _lead(store, size, deadline):
    token = os.urandom(8).hex()
    ready = f"{_PREFIX}.{token}.ready"
    answered = [None] * size
    poll = _POLL_FIRST_S
    while True:
        for r in range(1, size):
            key = f"{_PREFIX}.nonce.{r}"
            if answered[r] is None:
                _wait(store, key, deadline, f"rank 0: rank {r} never reached init_process_group")
            nonce = store.get(key).decode()
            if nonce != answered[r]:
                store.set(f"{_PREFIX}.answer.{r}", f"{token}:{nonce}")
                answered[r] = nonce
        if store.add(ready, 0) >= size - 1:
            return token
        poll = _pause(poll, deadline, "rank 0: not every rank took this attempt's token")


def _follow(store, rank, deadline):
    nonce = os.urandom(8).hex()
    store.set(f"{_PREFIX}.nonce.{rank}", nonce)
    key = f"{_PREFIX}.answer.{rank}"
    who = f"rank {rank}: rank 0 never answered"
    _wait(store, key, deadline, who)
    poll = _POLL_FIRST_S
    while True:
        token, _, seen = store.get(key).decode().partition(":")
        if seen == nonce:
            store.add(f"{_PREFIX}.{token}.ready", 1)
            return token
        poll = _pause(poll, deadline, who)
