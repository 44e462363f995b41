"""Collectives the ranks disagree on fail, on every rank, instead of waiting: different
collectives at one place of a group's order fail at once, naming both sides; one that a rank
never calls fails when the group's timeout expires, naming that rank and what it does. Every
wait is bounded by the group's timeout."""
import datetime
import re
import time

import pytest
import torch
import torch.distributed as dist


@pytest.fixture
def ranks():
    if dist.get_world_size() < 2:
        pytest.skip("a mismatch needs two ranks")
    return dist.get_rank(), dist.get_world_size()


def test_mismatched_collectives_fail_at_once_naming_both_sides(ranks):
    rank, size = ranks
    dist.barrier()
    t = torch.ones(4)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, 0)
    assert time.monotonic() - start < 10  # at once: the group's timeout is 60 s
    # (the other side is whichever broadcasting rank the coordinator heard first)
    assert re.search(r"Mismatched operations at collective #\d+ of the default group: rank 0 "
                     r"\(host [^)]+\) asked for all_reduce\(float32\[4\], SUM\), but rank "
                     r"[1-9]\d* \(host [^)]+\) asked for broadcast\(float32\[4\], src=0\)\.",
                     str(e.value)), str(e.value)
    # the group goes on: the next collective is the same everywhere
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [size] * 3


def test_a_collective_one_rank_never_calls_times_out_naming_it(ranks):
    rank, size = ranks
    late = size - 1
    group = dist.new_group(list(range(size)), timeout=datetime.timedelta(seconds=1))
    dist.barrier()
    t = torch.ones(4)
    if rank == late:
        time.sleep(2.5)  # its own code, past the group's deadline
    start = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        dist.all_reduce(t, group=group)
    waited, text = time.monotonic() - start, str(e.value)
    if rank != late:
        assert 0.9 < waited < 2.4, waited  # the deadline, not the late rank's return
        assert re.search(rf"Timed out at collective #1 of group \S+: all_reduce\(float32\[4\], "
                         rf"SUM\) waited [\d.]+ s, its deadline, for 1 rank that never asked for "
                         rf"it: rank {late} \(host [^)]+\) waits in no operation \(it runs its "
                         rf"own code", text), text
    else:  # it came after the others had failed: at once, told why
        assert waited < 1.0, waited
        assert f"(rank {late} asked for" in text and "after that failure" in text, text
    dist.barrier()
    dist.all_reduce(torch.ones(1), group=group)  # the group goes on
    dist.destroy_process_group(group)


def test_a_receive_whose_sender_never_sends_times_out_naming_it(ranks):
    rank, size = ranks
    group = dist.new_group(list(range(size)), timeout=datetime.timedelta(seconds=1))
    dist.barrier()
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(RuntimeError) as e:
            dist.recv(torch.empty(4), src=1, group=group, tag=77)  # (a tag of its own: its
            # messages stay numbered differently on the two ranks after this)
        waited, text = time.monotonic() - start, str(e.value)
        assert 0.9 < waited < 2.4, waited
        assert re.search(r"Timed out: the message from rank 1 to rank 0 \(tag 77, #0\) waited "
                         r"[\d.]+ s, its deadline, for 1 rank that never asked for it: rank 1 "
                         r"\(host [^,]+, pid \d+\) waits in no operation", text), text
    elif rank == 1:
        time.sleep(2.5)  # and never sends
    dist.barrier()
    dist.destroy_process_group(group)
