"""Whole jobs under the real horovodrun, driven from one pytest process: a rank SIGKILLed
mid-training, and the PyTorch example. HVD_BUILD_DIR names the build tree."""
import gzip
import os
import struct
import subprocess
import sys

import pytest

BUILD = os.environ.get("HVD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HOROVODRUN = os.path.join(BUILD, "horovodrun")


def job_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(BUILD, "python")
    return env


def run(args, timeout=240):
    return subprocess.run([HOROVODRUN] + args, env=job_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("np_, victim", [(2, 1), (3, 0), (3, 2)])
def test_survivors_raise_internal_error_within_two_seconds(tmp_path, np_, victim):
    script = os.path.join(SOURCE, "tests/python/jobs/peer_death.py")
    r = run(["-np", str(np_), sys.executable, script, str(tmp_path), str(victim)])
    assert r.returncode == 137, r.stdout + r.stderr  # the victim's SIGKILL, reported
    killed = float((tmp_path / "killed").read_text())
    for rank in range(np_):
        if rank == victim:
            continue
        report = tmp_path / f"rank{rank}"
        assert report.exists(), f"rank {rank} did not raise HorovodInternalError:\n{r.stdout}{r.stderr}"
        seen, message = report.read_text().split("\n", 1)
        assert float(seen) - killed < 2.0, f"rank {rank} took {float(seen) - killed:.2f} s"
        assert f"rank {victim}" in message, message


def test_pytorch_example_trains(tmp_path):
    example = os.path.join(SOURCE, "examples/pytorch/pytorch_fashion_mnist.py")
    r = run(["-np", "2", sys.executable, example, "--epochs", "1", "--train-limit", "6000",
             "--test-limit", "2000"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("[0]<stdout>:")]
    assert any("epoch 1/1" in l and "images/s" in l for l in lines), r.stdout
    acc = [l for l in lines if "test accuracy" in l]
    assert acc, r.stdout
    assert float(acc[-1].split("test accuracy")[1].split("%")[0]) > 60.0, acc[-1]


def mnist_layout(root, train, test):
    """torchvision's MNIST layout (root/MNIST/raw, uncompressed IDX files, which it finds
    and never downloads) holding the first images of Debian's Fashion-MNIST files."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    src = "/usr/share/datasets/fashion-mnist"
    for split, n in (("train", train), ("t10k", test)):
        for kind, item in (("images-idx3", 28 * 28), ("labels-idx1", 1)):
            with gzip.open(f"{src}/{split}-{kind}-ubyte.gz", "rb") as f:
                data = f.read()
            header = 16 if kind.startswith("images") else 8
            out = bytearray(data[:header])
            struct.pack_into(">I", out, 4, n)  # the image count
            (raw / f"{split}-{kind}-ubyte").write_bytes(bytes(out) + data[header:header + n * item])


@pytest.mark.parametrize("extra", [[], ["--fp16-allreduce", "--gradient-predivide-factor", "2"]])
def test_horovod_style_training_script(tmp_path, extra):
    mnist_layout(tmp_path, 6000, 1000)
    script = os.path.join(SOURCE, "tests/python/jobs/horovod_style_mnist.py")
    r = run(["-np", "2", sys.executable, script, "--data-dir", str(tmp_path), "--epochs", "2"] +
            extra)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0]<stdout>:Train Epoch: 1 " in r.stdout, r.stdout
    line = [l for l in r.stdout.splitlines() if "Test set: Average loss" in l]
    assert line, r.stdout
    assert float(line[-1].split("Accuracy: ")[1].rstrip("%")) > 40.0, line[-1]  # chance: 10
