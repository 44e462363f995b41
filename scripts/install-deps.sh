#!/usr/bin/env bash
# Install every Debian package hvd needs to build, test and run. Idempotent, and fast when
# everything is already there: it asks apt only for what is missing.
#
#   scripts/install-deps.sh           what the build and the test suite need (CI runs this)
#   scripts/install-deps.sh --bench   also the peers tools/compare_allreduce.sh measures
#                                     against: Open MPI's library and MPICH (PyTorch's gloo
#                                     comes with python3-torch, which the tests need anyway)
set -euo pipefail

# Two names below differ between Debian 12 (bookworm) and 13 (trixie); the others are the same.
# - libclang-rt-N-dev holds libFuzzer for clang N: bookworm's clang is 14, trixie's is 19 (and
#   trixie has no libclang-rt-14-dev).
# - Java for pyspark: bookworm's is 17, trixie's 21 (Spark 3.5 runs on both).
# - libpmix2 became libpmix2t64 in trixie (the 64-bit time_t transition). libpmix2 is only a
#   name libpmix2t64 provides there, which dpkg-query never reports installed, so asking for it
#   would run apt on every call.
debian_major=$(cut -d. -f1 /etc/debian_version 2>/dev/null || true)
case $debian_major in
  12) clang_rt=libclang-rt-14-dev pmix2=libpmix2 jre=openjdk-17-jre-headless ;;
  13) clang_rt=libclang-rt-19-dev pmix2=libpmix2t64 jre=openjdk-21-jre-headless ;;
  *)
    echo "install-deps: warning: /etc/debian_version is '${debian_major:-?}', not Debian 12 or" \
      "13; trying Debian 12's package names" >&2
    clang_rt=libclang-rt-14-dev pmix2=libpmix2 jre=openjdk-17-jre-headless
    ;;
esac

packages=(
  build-essential cmake pkg-config   # toolchain
  clang-format                       # the format check (unit.format)
  clang "$clang_rt"                  # libFuzzer for tests/fuzz (the default clang's compiler-rt)
  libssl-dev                         # libcrypto: HMAC-SHA256 for every authenticated wire
  libmicrohttpd-dev                  # the rendezvous HTTP server in horovodrun
  libyaml-dev                        # horovodrun --config-file
  libcmocka-dev                      # unit tests
  procps psmisc curl                 # ps/pgrep and a stranger's HTTP client in the end-to-end tests
  iproute2                           # ss (find a worker's data port) and ip netns
  iptables                           # tests/netns: a filtered port, a dropped link
  openssh-server openssh-client      # tests/netns: an sshd per namespace "host", ssh into it
  iputils-ping                       # tests/netns: reachability checks between namespaces
  strace                             # tests/netns: records a request to replay it at the driver
  openmpi-bin                        # horovodrun --mpi (and its test across namespaces)
  libpmix-dev                        # pmix.h: ranks of a plain Open MPI mpirun meet through PMIx
  slurmctld slurmd slurm-client      # tests/slurm: a real Slurm cluster on the netns hosts (srun)
  munge                              # tests/slurm: Slurm's authentication (the cluster's own munged)
  slurm-wlm-basic-plugins "$pmix2"   # tests/slurm: srun --mpi=pmix (dlopens libpmix-dev's libpmix.so)
  zlib1g-dev dataset-fashion-mnist   # the training example and its data (gzip'd IDX)
  python3                            # tests parse the timeline with Python's json module
  python3-dev                        # Python.h: the horovod package's extension module
  python3-torch python3-numpy        # horovod.torch, its tests and the PyTorch example
  python3-pytest python3-cloudpickle # the Python tests; broadcast_object / allgather_object
  python3-torchvision python3-filelock # scripts written like Horovod's examples (datasets, FileLock)
  python3-mpi4py                     # hvd.init(comm=...) with an MPI communicator
  python3-pip python3-venv           # pip install . into a venv (the Quick start, e2e.pip)
  python3-setuptools python3-wheel   # what setup.py builds with, and pip wheel .
  "$jre"                             # pyspark (horovod.spark's tests run a real Spark)
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(
    libopenmpi-dev                   # mpi.h for mpicc: the Open MPI peers (mpi, mpishm)
    mpich libmpich-dev               # the MPICH peer, through mpicc.mpich / mpirun.mpich only
  )
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--bench]" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# horovodrun --mpi and its tests run plain `mpirun`, which must be Open MPI's. MPICH registers
# the same alternatives (mpirun, mpi for mpicc, mpi-<triplet> for mpi.h/libmpi.so) at priority
# 40 against Open MPI's 50, so in auto mode installing it changes nothing; but an alternative
# left in manual mode on MPICH would, so point any that moved back at Open MPI.
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
for alt in "mpirun /usr/bin/mpirun.openmpi" "mpi /usr/bin/mpicc.openmpi" \
  "mpi-$triplet /usr/lib/$triplet/openmpi/include"; do
  read -r name path <<<"$alt"
  [[ -e $path ]] || continue # that part of Open MPI is not installed (no --bench)
  current=$(update-alternatives --query "$name" 2>/dev/null | sed -n "s/^Value: //p" || true)
  if [[ $current != "$path" ]]; then
    echo "install-deps: $name pointed to ${current:-nothing}, setting it back to Open MPI"
    $sudo update-alternatives --set "$name" "$path"
  fi
done

# The venvs of PyPI's frameworks are made with Python 3.11, their wheels': the python3 on PATH
# where it is 3.11 (not Debian's own, which pip may not touch), else Debian 12's
# /usr/bin/python3.
py311() {
  local cand
  for cand in "$(command -v python3 || true)" /usr/bin/python3; do
    [[ -n $cand ]] || continue
    if "$cand" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      echo "$cand"
      return 0
    fi
  done
  return 1
}

# make_venv DIR WHAT CHECK PIN...: (re)make the venv DIR with the PINs unless its python runs
# CHECK (Python code) successfully already; WHAT names it in messages.
make_venv() {
  local dir=$1 what=$2 check=$3
  shift 3
  if [[ -x $dir/bin/python ]] && "$dir/bin/python" -c "$check" 2>/dev/null; then
    echo "install-deps: $dir has $what"
    return 0
  fi
  local py
  if ! py=$(py311); then
    echo "install-deps: no Python 3.11 with venv (the $what wheels'): set PATH so that" \
      "python3 is one" >&2
    exit 1
  fi
  echo "install-deps: making $dir ($py) with $*"
  $sudo rm -rf "$dir"
  $sudo mkdir -p "$(dirname "$dir")"
  $sudo "$py" -m venv "$dir"
  # (pip's notes about find-links folders that hold no such package are noise)
  $sudo "$dir/bin/pip" install -q "$@" 2>&1 | grep -v "^WARNING: Location" || true
  "$dir/bin/python" -c "$check"
}

# Current PyTorch from PyPI, the main target of the Python tests: a venv with torch 2.13.0 (the
# CPU wheel this project's machines hold: any other version would be several GB of CUDA
# wheels) and what the tests import. The tests (python/CMakeLists.txt) run under it and under
# Debian's python3-torch. HVD_TORCH_VENV moves it; HVD_NO_TORCH_VENV=1 leaves it out.
torch_venv=${HVD_TORCH_VENV:-/opt/hvd/venv-torch2.13}
if [[ ${HVD_NO_TORCH_VENV:-0} == 1 ]]; then
  echo "install-deps: HVD_NO_TORCH_VENV=1: no venv with PyPI's torch"
else
  make_venv "$torch_venv" "torch 2.13.0" 'import torch, numpy, pytest, cloudpickle, filelock, mpi4py
assert torch.__version__.split("+")[0] == "2.13.0"' \
    torch==2.13.0 numpy pytest cloudpickle filelock mpi4py
fi

# Current TensorFlow from PyPI for horovod.tensorflow and horovod.keras and their tests, in a
# venv of its own (TensorFlow pins numpy and protobuf versions of its own): the CPU wheel,
# tf-keras (Keras 2, for TF_USE_LEGACY_KERAS=1 and Horovod's own Keras tests) and what the
# tests import. HVD_TF_VENV moves it; HVD_NO_TF_VENV=1 leaves it out.
tf_venv=${HVD_TF_VENV:-/opt/hvd/venv-tf}
if [[ ${HVD_NO_TF_VENV:-0} == 1 ]]; then
  echo "install-deps: HVD_NO_TF_VENV=1: no venv with PyPI's TensorFlow"
else
  make_venv "$tf_venv" "tensorflow-cpu 2.21.0" 'import os; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow, tf_keras, pytest, cloudpickle, mock, parameterized, packaging
assert tensorflow.__version__ == "2.21.0"' \
    tensorflow-cpu==2.21.0 tf-keras==2.21.0 pytest cloudpickle mock parameterized packaging
fi

# pyspark from PyPI into the same venv, for horovod.spark and its tests: a whole Spark (local,
# local-cluster and standalone masters and workers) in one package, on the Java above.
# Horovod 0.28.1 supports Spark 3.x, so the comparison with it runs on this one too.
pyspark_pin=pyspark==3.5.3
if [[ ${HVD_NO_TORCH_VENV:-0} != 1 ]]; then
  if "$torch_venv/bin/python" -c 'import pyspark; assert pyspark.__version__ == "3.5.3"' 2>/dev/null; then
    echo "install-deps: $torch_venv has $pyspark_pin"
  else
    echo "install-deps: installing $pyspark_pin into $torch_venv"
    $sudo "$torch_venv/bin/pip" install -q "$pyspark_pin" 2>&1 | grep -v "^WARNING: Location" || true
    "$torch_venv/bin/python" -c 'import pyspark; print("install-deps: pyspark", pyspark.__version__)'
  fi
fi
