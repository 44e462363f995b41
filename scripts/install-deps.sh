#!/usr/bin/env bash
# Install every Debian package hvd needs to build, test and run. Idempotent, and fast when
# everything is already there: it asks apt only for what is missing.
#
#   scripts/install-deps.sh           what the build and the test suite need (CI runs this)
#   scripts/install-deps.sh --bench   also the peers tools/compare_allreduce.sh measures
#                                     against: Open MPI's library and MPICH (PyTorch's gloo
#                                     comes with python3-torch, which the tests need anyway)
set -euo pipefail

packages=(
  build-essential cmake pkg-config   # toolchain
  clang-format                       # the format check (unit.format)
  clang libclang-rt-14-dev           # libFuzzer for tests/fuzz
  libssl-dev                         # libcrypto: HMAC-SHA256 for every authenticated wire
  libmicrohttpd-dev                  # the rendezvous HTTP server in horovodrun
  libyaml-dev                        # horovodrun --config-file
  libcmocka-dev                      # unit tests
  procps psmisc curl                 # ps/pgrep and a stranger's HTTP client in the end-to-end tests
  iproute2                           # ss (find a worker's data port) and ip netns
  openssh-server openssh-client      # tests/netns: an sshd per namespace "host", ssh into it
  iputils-ping                       # tests/netns: reachability checks between namespaces
  strace                             # tests/netns: records a request to replay it at the driver
  openmpi-bin                        # horovodrun --mpi (and its test across namespaces)
  libpmix-dev                        # pmix.h: ranks of a plain Open MPI mpirun meet through PMIx
  slurmctld slurmd slurm-client      # tests/slurm: a real Slurm cluster on the netns hosts (srun)
  munge                              # tests/slurm: Slurm's authentication (the cluster's own munged)
  slurm-wlm-basic-plugins libpmix2   # tests/slurm: srun --mpi=pmix (dlopens libpmix-dev's libpmix.so)
  zlib1g-dev dataset-fashion-mnist   # the training example and its data (gzip'd IDX)
  python3                            # tests parse the timeline with Python's json module
  python3-dev                        # Python.h: the horovod package's extension module
  python3-torch python3-numpy        # horovod.torch, its tests and the PyTorch example
  python3-pytest python3-cloudpickle # the Python tests; broadcast_object / allgather_object
  python3-torchvision python3-filelock # scripts written like Horovod's examples (datasets, FileLock)
  python3-mpi4py                     # hvd.init(comm=...) with an MPI communicator
  python3-pip python3-venv           # pip install . into a venv (the Quick start, e2e.pip)
  python3-setuptools python3-wheel   # what setup.py builds with, and pip wheel .
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
