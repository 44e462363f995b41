#!/usr/bin/env bash
# pip: the source tree (tracked and untracked files, not build trees) builds a wheel with
# `pip wheel .` and no index; the wheel installs into a fresh venv (made with
# --system-site-packages, so Debian's torch is seen) and into a --user site; each install's
# own horovodrun runs a two-rank horovod.torch job with its own python only (no PYTHONPATH,
# no build tree on any path, another working directory), `horovodrun --check-build` says
# PyTorch is there, and `pip uninstall horovod` leaves nothing of what the install wrote.
# A build variable hvd cannot honour fails at once, saying why. Where the TensorFlow venv of
# scripts/install-deps.sh exists, the wheel is built in an environment that imports
# tensorflow, so it holds horovod.tensorflow's kernels, and a horovod.tensorflow job runs from
# it too; HOROVOD_WITH_TENSORFLOW=1 without TensorFlow is refused.
source "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
src=$TMP/src
mkdir -p "$src"
(cd "$HVD_SOURCE_DIR" && git ls-files -co --exclude-standard -z | xargs -0 tar cf - 2>/dev/null) |
  tar xf - -C "$src"
[[ -f $src/setup.py ]] || fail "no setup.py in the source tree"

# a request hvd cannot honour: refused before anything is built, naming the variable
rc=0
msg=$(cd "$src" && HOROVOD_GPU_OPERATIONS=NCCL $PY -m pip wheel --no-index --no-deps -w "$TMP/none" . 2>&1) ||
  rc=$?
((rc != 0)) || fail "HOROVOD_GPU_OPERATIONS=NCCL: the build went on"
expect_contains "NCCL refused" "$msg" "HOROVOD_GPU_OPERATIONS=NCCL: hvd runs its collectives on the CPU"
! compgen -G "$src/build-pip/temp*" >/dev/null || fail "NCCL refused after the build had started"

rc=0
msg=$(cd "$src" && HOROVOD_WITH_TENSORFLOW=1 $PY -m pip wheel --no-index --no-deps -w "$TMP/none" . 2>&1) ||
  rc=$?
((rc != 0)) || fail "HOROVOD_WITH_TENSORFLOW=1 without TensorFlow: the build went on"
expect_contains "TensorFlow required" "$msg" "HOROVOD_WITH_TENSORFLOW=1 but this Python cannot import tensorflow"

# The building environment: a venv on the Python of the TensorFlow venv, whose packages it sees
# through a .pth file (as the venv on PyPI's torch below), else Debian's python3.
tf_venv=${HVD_TF_VENV:-/opt/hvd/venv-tf}
build_py=$PY
if [[ -x $tf_venv/bin/python ]]; then
  "$tf_venv/bin/python" -m venv "$TMP/venvtf"
  site=$("$TMP/venvtf/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$tf_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$site/tf_venv.pth"
  build_py=$TMP/venvtf/bin/python
else
  echo "note: no $tf_venv (scripts/install-deps.sh makes it): the wheel is built without TensorFlow"
fi
(cd "$src" && TF_CPP_MIN_LOG_LEVEL=3 $build_py -m pip wheel --no-index --no-deps -w "$TMP/wheels" . \
  >"$TMP/wheel.log" 2>&1) || fail "pip wheel failed: $(tail -n 30 "$TMP/wheel.log")"
wheel=$(ls "$TMP"/wheels/horovod-*.whl)
[[ $wheel == *-cp3*-linux_*.whl ]] || fail "not a platform wheel: $wheel"
listing=$($PY -m zipfile -l "$wheel")
for f in horovod/_hvd. horovod/lib/libhvd.so.0 horovod/torch/__init__.py data/data/bin/horovodrun \
  data/data/bin/horovodrun-slurm-hosts; do
  expect_contains "wheel holds $f" "$listing" "$f"
done
if [[ $build_py != "$PY" ]]; then
  expect_contains "wheel holds TensorFlow's kernels" "$listing" "horovod/tensorflow/mpi_lib.cpython-"
fi

mkdir -p "$TMP/run"
cat >"$TMP/run/job.py" <<'PYJOB'
import os, sys
import torch
import horovod.torch as hvd
hvd.init()
t = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum)
assert t.item() == 3.0, t
print(f"rank {hvd.rank()} of {hvd.size()}: {t.item()} from {hvd.__file__}", flush=True)
hvd.shutdown()
PYJOB

# check_install NAME BIN PYTHON [ENV...]: the job through that install's horovodrun and python
check_install() {
  local name=$1 bin=$2 py=$3
  shift 3
  local out
  out=$(cd "$TMP/run" && env -i HOME="$TMP/home" PATH="$bin:/usr/bin:/bin" "$@" \
    "$bin/horovodrun" -np 2 "$py" job.py 2>&1) || fail "$name: the job failed: $out"
  [[ $out == *"rank 0 of 2: 3.0 from $TMP/"* && $out == *"rank 1 of 2: 3.0"* ]] ||
    fail "$name: the job did not run on the installed package: $out"
  [[ $out != *"$HVD_SOURCE_DIR"* && $out != *"/build/"* ]] || fail "$name: a build tree was used: $out"
  out=$(env -i PATH="$bin:/usr/bin:/bin" "$bin/horovodrun" --check-build)
  expect_contains "$name: --check-build" "$out" "[X] PyTorch"
  ok "$name: two ranks through the installed horovodrun and horovod.torch"
}
ok() { echo "ok   $*"; }
mkdir -p "$TMP/home"

# a fresh venv that sees Debian's torch
$PY -m venv --system-site-packages "$TMP/venv"
find "$TMP/venv" | sort >"$TMP/venv.before"
"$TMP/venv/bin/pip" install --no-index --no-deps "$wheel" >"$TMP/install.log" 2>&1 ||
  fail "pip install into the venv: $(cat "$TMP/install.log")"
check_install venv "$TMP/venv/bin" "$TMP/venv/bin/python"
"$TMP/venv/bin/pip" uninstall -y horovod >/dev/null
find "$TMP/venv" | sort >"$TMP/venv.after"
left=$(comm -13 "$TMP/venv.before" "$TMP/venv.after")
[[ -z $left ]] || fail "venv: pip uninstall left files: $left"
ok "venv: pip uninstall removed every file the install wrote"

# a --user install (its base under this test's folder)
export PYTHONUSERBASE=$TMP/userbase
HOME=$TMP/home $PY -m pip install --user --break-system-packages --no-index --no-deps "$wheel" \
  >"$TMP/user.log" 2>&1 || fail "pip install --user: $(cat "$TMP/user.log")"
check_install user "$TMP/userbase/bin" "$PY" PYTHONUSERBASE="$TMP/userbase"
HOME=$TMP/home $PY -m pip uninstall -y --break-system-packages horovod >/dev/null
left=$(find "$TMP/userbase" -type f)
[[ -z $left ]] || fail "--user: pip uninstall left files: $left"
ok "--user: installed, ran, uninstalled without a trace"

# the Quick start's environment: a venv of its own (no system site packages) on the Python of
# the venv with PyPI's torch 2.13 that scripts/install-deps.sh makes, whose packages it sees
# through a .pth file (a copy of the CPU wheel's 700 MB would be all this test downloads)
torch_venv=${HVD_TORCH_VENV:-/opt/hvd/venv-torch2.13}
if [[ -x $torch_venv/bin/python ]]; then
  "$torch_venv/bin/python" -m venv "$TMP/venv2"
  site=$("$TMP/venv2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$torch_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$site/torch_venv.pth"
  "$TMP/venv2/bin/pip" install --no-index --no-deps "$wheel" >"$TMP/install2.log" 2>&1 ||
    fail "pip install into a venv on PyPI's torch: $(cat "$TMP/install2.log")"
  version=$("$TMP/venv2/bin/python" -c 'import torch; print(torch.__version__)')
  [[ $version == 2.* ]] || fail "the venv on PyPI's torch imports torch $version"
  check_install "venv on torch $version" "$TMP/venv2/bin" "$TMP/venv2/bin/python"
else
  echo "note: no $torch_venv (scripts/install-deps.sh makes it): the install on PyPI's torch is not checked"
fi

# horovod.tensorflow from the wheel, in the environment that built it
if [[ $build_py != "$PY" ]]; then
  "$TMP/venvtf/bin/pip" install --no-index --no-deps "$wheel" >"$TMP/install3.log" 2>&1 ||
    fail "pip install into the TensorFlow venv: $(cat "$TMP/install3.log")"
  cat >"$TMP/run/tfjob.py" <<'PYJOB'
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
t = hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum)
assert float(t[0]) == 3.0, t
print(f"rank {hvd.rank()} of {hvd.size()}: {float(t[0])} from {hvd.__file__}", flush=True)
PYJOB
  out=$(cd "$TMP/run" && env -i HOME="$TMP/home" PATH="$TMP/venvtf/bin:/usr/bin:/bin" TF_CPP_MIN_LOG_LEVEL=3 \
    "$TMP/venvtf/bin/horovodrun" -np 2 "$TMP/venvtf/bin/python" tfjob.py 2>&1) ||
    fail "the TensorFlow job failed: $out"
  [[ $out == *"rank 0 of 2: 3.0 from $TMP/venvtf/"* && $out == *"rank 1 of 2: 3.0"* ]] ||
    fail "the TensorFlow job did not run on the installed package: $out"
  out=$(env -i PATH="$TMP/venvtf/bin:/usr/bin:/bin" "$TMP/venvtf/bin/horovodrun" --check-build)
  expect_contains "TensorFlow venv: --check-build" "$out" "[X] TensorFlow"
  ok "TensorFlow venv: two ranks of horovod.tensorflow from the wheel's kernels"
fi
pass
