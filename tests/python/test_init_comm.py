"""hvd.init(comm=...) (horovod/common/mpi_comm.py): an mpi4py communicator or a list of global
ranks is the world, under Open MPI's mpirun and under horovodrun --mpi; under horovodrun
alone, a list of the whole job is that job and a strict subset is refused, saying what to do.
Whole jobs driven from one pytest process; HVD_BUILD_DIR names the build tree."""
import os
import re
import subprocess
import sys

import pytest

BUILD = os.environ.get("HVD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(SOURCE, "tests/python/jobs/init_comm.py")
MPIRUN = "mpirun.openmpi"


def run(cmd, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("mode,sizes", [("world", [4] * 4), ("split", [2] * 4),
                                        ("list", [2] * 4)])
def test_mpirun(mode, sizes):
    r = run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable,
             SCRIPT, mode])
    assert r.returncode == 0, r.stdout + r.stderr
    # (mpirun may run the ranks' lines together: match, not split)
    got = sorted(int(n) for n in re.findall(r"hvd rank \d+ of (\d+), sum [\d.]+ ok", r.stdout))
    assert got == sorted(sizes), r.stdout


def test_horovodrun_mpi_split():
    r = run([os.path.join(BUILD, "horovodrun"), "--mpi", "-np", "4", sys.executable, SCRIPT,
             "split"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(re.findall(r"hvd rank \d+ of 2, sum [\d.]+ ok", r.stdout)) == 4, r.stdout


SUBSET = """
import horovod.torch as hvd, torch
hvd.init(comm=[0, 1])  # the whole job: accepted
assert hvd.size() == 2
hvd.shutdown()
try:
    hvd.init(comm=[0])
except ValueError as e:
    print("refused:", e, flush=True)
else:
    raise SystemExit("a subset was accepted without MPI")
"""


def test_horovodrun_without_mpi_whole_job_or_clear_error(tmp_path):
    script = tmp_path / "subset.py"
    script.write_text(SUBSET)
    r = run([os.path.join(BUILD, "horovodrun"), "-np", "2", sys.executable, str(script)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("refused: hvd.init(comm=[0]): a subset of the job's ranks needs MPI") == 2, r.stdout


def test_bad_comm_is_refused(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import horovod.torch as hvd\n"
                      "try:\n    hvd.init(comm='world')\n"
                      "except ValueError as e:\n    print('refused:', e)\n")
    r = run([sys.executable, str(script)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused: hvd.init(comm=...) takes a list of ranks or an mpi4py communicator" in r.stdout, r.stdout
