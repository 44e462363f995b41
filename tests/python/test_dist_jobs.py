"""Whole torch.distributed jobs on the "hvd" backend (tests/python/jobs/ddp_job.py), driven from
one pytest process: DDP ends with gloo's weights bit for bit, a rank SIGKILLed or SIGSTOPped
mid-training is named by every survivor, and torchrun --max_restarts resumes from a
checkpoint. HVD_BUILD_DIR names the build tree."""
import os
import re
import sys

import pytest
import torch
from proctree import run_job
from torchrun import free_port

BUILD = os.environ.get("HVD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "ddp_job.py")
TORCHRUN = [sys.executable, os.path.join(HERE, "torchrun.py")]
HOROVODRUN = [os.path.join(BUILD, "horovodrun")]


def run(launcher, np_, args, timeout=120, until=None, extra=()):
    """Run the job under launcher (proctree.run_job): its exit status and output."""
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    if launcher == "torchrun":
        cmd = TORCHRUN + ["--nproc_per_node", str(np_)] + list(extra) + [JOB] + args
    else:
        cmd = HOROVODRUN + ["-np", str(np_), sys.executable, JOB] + args
    return run_job(cmd, env, timeout, until)


def test_ddp_same_weights_as_gloo_then_a_rank_leaving_early_then_exit_in_a_callback(tmp_path):
    # one job: DDP on hvd, then the same DDP over a gloo group of the same ranks (gloo sums
    # two values exactly, and so does hvd); then the script ends while an operation's future
    # callback still runs: a daemon thread still in a future's C++ callback when Python
    # finalizes aborts the process ("terminate called without an active exception"), so the
    # backend drains them at exit. Before it ends, rank 1 leaves early (uneven inputs): rank
    # 0's next collective fails at once, saying so
    rc, out = run("torchrun", 2, ["hvd", str(tmp_path), "train,exit_in_callback,uneven"])
    assert rc == 0, out
    hvd, gloo = torch.load(tmp_path / "weights.pt"), torch.load(tmp_path / "gloo_weights.pt")
    assert hvd.keys() == gloo.keys()
    for name, w in gloo.items():
        assert torch.equal(w, hvd[name]), name
    for r in range(2):
        assert (tmp_path / f"callback{r}").read_text() == "[2.0, 2.0, 2.0]"
    waited, text = (tmp_path / "uneven0").read_text().split("\n", 1)
    assert float(waited) < 5, waited
    assert re.search(r"rank 1 \([^)]+\) has shut down \(it called hvd_shutdown\), so no "
                     r"collective can run any more; this rank waits in all_reduce\(float32\[4\], "
                     r"SUM\): if the ranks ran different numbers of steps, give every rank the "
                     r"same number of batches "
                     r"\(DistributedSampler with drop_last=True\) or use hvd\.join\(\) or DDP's "
                     r"Join", text), text


def test_exit_with_a_work_never_waited_for(tmp_path):
    # the script drops an operation's Work unwaited; Python collects it as it finalizes, when
    # no thread can start any more (Thread.start waited for ever): the exit must not hang
    script = tmp_path / "dropped.py"
    script.write_text("import torch, torch.distributed as dist, horovod.torch\n"
                      "dist.init_process_group('hvd', rank=0, world_size=1)\n"
                      "dropped = [dist.all_reduce(torch.ones(2), async_op=True)]\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    rc, out = run_job([sys.executable, str(script)], env, 30)
    assert rc == 0, out


def survivors(out_dir, np_, victim, out):
    assert (out_dir / "killed").exists(), f"rank {victim} never reached its step 20:\n{out}"
    killed = float((out_dir / "killed").read_text())
    reports = {}
    for rank in range(np_):
        if rank == victim:
            continue
        f = out_dir / f"rank{rank}"
        assert f.exists(), f"rank {rank} saw no error:\n{out}"
        seen, rest = f.read_text().split("\n", 1)
        reports[rank] = (float(seen) - killed, rest)
    return reports


@pytest.mark.parametrize("launcher", ["torchrun", "horovodrun"])
def test_killed_rank_is_named_within_two_seconds(tmp_path, launcher):
    rc, out = run(launcher, 3, ["hvd", str(tmp_path), "kill", "1"], timeout=120)
    for rank, (after, text) in survivors(tmp_path, 3, 1, out).items():
        assert after < 2.0, f"rank {rank} raised {after:.2f} s after the kill"
        assert "rank 1 (host " in text, text
        assert "next: " in text and "rank 1" in text.split("next: ")[1], text


def test_stopped_rank_is_named_when_the_timeout_expires(tmp_path):
    # init_process_group(timeout=3 s) bounds every wait of the backend
    rc, out = run("torchrun", 3, ["hvd", str(tmp_path), "stop", "1", "3"], timeout=120,
                  until=lambda: all((tmp_path / f"rank{r}").exists() for r in (0, 2)))
    for rank, (after, text) in survivors(tmp_path, 3, 1, out).items():
        assert 2.5 < after < 8.0, f"rank {rank} raised {after:.2f} s after the stop"
        assert "rank 1" in text, text


def test_store_wait_that_runs_out_is_a_timeout():
    # hvd_init_store names the rank that never checked in when the store's get raises
    # TimeoutError; torch 1.13's stores say only "Socket Timeout" and have no check()
    from datetime import timedelta
    import torch.distributed as dist
    from horovod.torch.distributed import _store_callbacks
    for prefix in (None, "default_pg"):
        # (a fresh store each time: a TCPStore whose wait ran out answers nothing more)
        store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=30))
        set_, get = _store_callbacks(dist.PrefixStore(prefix, store) if prefix else store)
        set_("hvd.0.rank_0", b"record")
        assert get("hvd.0.rank_0", 200) == b"record"
        with pytest.raises(TimeoutError):
            get("hvd.0.rank_1", 200)


def test_torchrun_restart_resumes_from_checkpoint(tmp_path):
    rc, out = run("torchrun", 3, ["hvd", str(tmp_path), "resume", "1"], timeout=180,
                  extra=["--max_restarts", "1"])
    assert rc == 0, out
    done = [(tmp_path / f"done{r}").read_text().split() for r in range(3)]
    for start, attempt, checksum in done:
        assert attempt == "1"  # the second attempt finished
        assert int(start) >= 5  # from the checkpoint the first attempt wrote
    assert len({d[2] for d in done}) == 1  # every rank ended with the same weights
