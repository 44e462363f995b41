"""horovod.torch.store_attempt: the ranks of a torchrun attempt agree on one token through a
store that still holds a dead attempt's keys (torchrun 2 keeps its agent's store for every
round), whatever order the ranks arrive in. Ranks are threads here, on one in-process store."""
import threading
import time

import pytest
import torch.distributed as dist

from horovod.torch import store_attempt


def attempt(store, size, timeout_s=20, delay=None):
    """Every rank's token (rank r starts after delay[r] seconds)."""
    tokens, errors = [None] * size, []

    def rank(r):
        try:
            time.sleep((delay or {}).get(r, 0))
            tokens[r] = store_attempt.agree(store, r, size, timeout_s)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return tokens


def test_fresh_store_one_token():
    tokens = attempt(dist.HashStore(), 4)
    assert len(set(tokens)) == 1 and len(tokens[0]) == 16


@pytest.mark.parametrize("late", ["leader", "followers"])
def test_restart_never_takes_the_dead_attempts_token(late):
    store = dist.HashStore()
    first = attempt(store, 3)[0]
    # a late leader: the followers find the dead attempt's answers, carrying its nonces;
    # late followers: the leader finds their dead nonces and must answer again
    delay = {0: 0.3} if late == "leader" else {1: 0.3, 2: 0.5}
    second = attempt(store, 3, delay=delay)
    assert len(set(second)) == 1 and second[0] != first
    third = attempt(store, 3)
    assert len(set(third)) == 1 and third[0] not in (first, second[0])


def test_a_smaller_restart():
    store = dist.HashStore()
    attempt(store, 4)
    tokens = attempt(store, 2, delay={0: 0.2})
    assert len(set(tokens)) == 1


def test_a_missing_rank_is_named():
    with pytest.raises(TimeoutError, match="rank 0: rank 1 never reached init_process_group"):
        store_attempt.agree(dist.HashStore(), 0, 2, 1)


def test_a_missing_leader_is_named():
    store = dist.HashStore()
    attempt(store, 2)  # a dead attempt's answer is there, but not for this nonce
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="rank 1: rank 0 never answered"):
        store_attempt.agree(store, 1, 2, 1)
    assert time.monotonic() - t0 < 5


def test_one_rank_needs_no_store():
    assert len(store_attempt.agree(None, 0, 1, 1)) == 16
