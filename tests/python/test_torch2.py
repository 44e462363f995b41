"""What torch 2 users run on the CPU with gloo, on the "hvd" backend (tests/python/jobs/
torch2_job.py under torchrun), driven from one pytest process: FSDP, fully_shard, DDP over a
torch.compile'd model and torch.compile over DDP end with gloo's weights bit for bit, DTensor's redistributions give the
arithmetic's results on 1-D and 2-D meshes, a distributed checkpoint saved and loaded across
ranks resumes training exactly, and dist.monitored_barrier names late ranks as gloo does.
The modes of one comparison run in one job per backend. HVD_BUILD_DIR names the build tree."""
import os
import sys

import pytest
import torch
from proctree import run_job

BUILD = os.environ.get("HVD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "torch2_job.py")
TORCHRUN = [sys.executable, os.path.join(HERE, "torchrun.py")]
# compared with gloo at np 2, where a sum of two values is the same in any order
COMPARED = ["fsdp", "fully_shard", "ddp_compile", "compile_ddp", "dcp", "dtensor"]


def run(backend, out_dir, modes, np_=2, timeout=300, **extra_env):
    out_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), **extra_env)
    rc, out = run_job(TORCHRUN + ["--nproc_per_node", str(np_), JOB, backend, str(out_dir),
                                  ",".join(modes)], env, timeout)
    assert rc == 0, f"{modes} on {backend}:\n{out[-6000:]}"
    return out


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Every compared mode's output directory, on gloo and on hvd: {backend: path}."""
    base = tmp_path_factory.mktemp("compared")
    paths = {}
    for backend in ("gloo", "hvd"):
        run(backend, base / backend, COMPARED)
        paths[backend] = base / backend
    return paths


def assert_same(a, b, what):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        a, b = list(a.values()), [b[k] for k in a]
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"{what}: tensor {i} differs between gloo and hvd"


@pytest.mark.parametrize("mode", ["fully_shard", "ddp_compile", "compile_ddp", "dcp"])
def test_same_weights_as_gloo(compared, mode):
    assert_same(torch.load(compared["gloo"] / mode / "weights.pt"),
                torch.load(compared["hvd"] / mode / "weights.pt"), mode)
    if mode == "ddp_compile":  # the model really ran through inductor's generated code
        text = (compared["hvd"] / mode / "compiled").read_text().strip()
        assert text.startswith("inductor graphs: ") and text != "inductor graphs: 0", text


def test_broadcast_under_torch_compile_still_raises(compared):
    """torch.compile runs the backend's broadcast outside dynamo's trace, through a wrapper:
    the error of a mismatched broadcast still reaches torch.distributed.broadcast's caller."""
    for rank in range(2):
        text = (compared["hvd"] / "compile_ddp" / f"mismatch{rank}").read_text()
        assert "Mismatched operations at collective #" in text, text
        assert "broadcast(float32[4], src=0)" in text, text


def test_fsdp_shards_as_on_gloo(compared):
    for r in range(2):
        assert_same(torch.load(compared["gloo"] / "fsdp" / f"shard{r}.pt"),
                    torch.load(compared["hvd"] / "fsdp" / f"shard{r}.pt"), f"FSDP shard of rank {r}")


DTENSOR_CHECKS = "shard/full_tensor shard->replicate replicate->shard1 partial->replicate/shard matmul"


def test_dtensor_redistributions(compared):
    for backend in ("gloo", "hvd"):
        for r in range(2):
            assert (compared[backend] / "dtensor" / f"dtensor{r}").read_text().strip() == \
                DTENSOR_CHECKS, backend


@pytest.fixture(scope="module")
def hvd_np4(tmp_path_factory):
    """One job at np 4 on hvd: the 2-D mesh, then monitored_barrier. Its output directory.
    (With TORCH_DISTRIBUTED_DEBUG=DETAIL, which changes nothing on hvd.)"""
    base = tmp_path_factory.mktemp("np4")
    run("hvd", base / "hvd", ["dtensor", "monitored_barrier"], np_=4,
        TORCH_DISTRIBUTED_DEBUG="DETAIL")
    return base / "hvd"


def test_dtensor_on_a_2d_mesh(hvd_np4):
    for r in range(4):
        assert (hvd_np4 / "dtensor" / f"dtensor{r}").read_text().strip() == \
            DTENSOR_CHECKS + " mesh2d"


@pytest.mark.parametrize("backend", ["gloo", "hvd"])
def test_monitored_barrier_names_the_late_ranks(tmp_path, backend, request):
    # torch implements monitored_barrier for gloo only; the backend runs it for hvd's groups,
    # and rank 0 names the ranks that did not come within the timeout as gloo does.
    # (gloo's job runs without TORCH_DISTRIBUTED_DEBUG=DETAIL: DETAIL's wrapper fails gloo's
    # monitored barrier with late ranks, torch 2.13)
    if backend == "hvd":
        d, np_ = request.getfixturevalue("hvd_np4") / "monitored_barrier", 4
    else:
        run(backend, tmp_path / backend, ["monitored_barrier"], np_=3)
        d, np_ = tmp_path / backend / "monitored_barrier", 3
    for r in range(np_):
        assert (d / f"all_arrive{r}").read_text().strip() == "ok"
    late0 = (d / "late0").read_text()
    late = ", ".join(str(r) for r in range(1, np_))
    assert f"Ranks {late} failed to pass monitoredBarrier in 2000 ms" in late0, late0
    for r in range(1, np_):
        assert (d / f"late{r}").read_text().startswith("error: "), r
