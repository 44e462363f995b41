# shellcheck shell=bash
# Shared set-up of the Slurm tests (sourced): the checks of tests/netns/lib.sh and Slurm's
# programs, a cluster of three hosts (tests/slurm/cluster.sh) torn down on exit with $TMP,
# and on1 TIMEOUT CMD... to run a command on h1 (where the tests submit their jobs).
# slurm_test_setup NAME: exits 77 (skipped) where root, ip netns, sshd or Slurm are missing.
: "${HVD_BUILD_DIR:?set by ctest}"
slurm_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$slurm_here/../netns/lib.sh"
cluster=$slurm_here/cluster.sh

slurm_test_setup() {
  netns_require "$1"
  local cmd
  for cmd in slurmctld slurmd srun munged; do
    command -v "$cmd" >/dev/null || [[ -x /usr/sbin/$cmd ]] || netns_skip "$cmd not installed (scripts/install-deps.sh)"
  done
  TMP=$(mktemp -d "/tmp/hvd-slurm-$1.XXXXXX")
  chmod 755 "$TMP" # the ranks write here
  export HVD_SLURM_DIR=/tmp/hvd-slurm-$HVD_NETBED_PREFIX
  trap slurm_cleanup EXIT
  trap 'echo "interrupted"; exit 130' INT TERM HUP
  timeout 120 bash "$cluster" up 3 || fail "the Slurm cluster did not come up"
}
# shellcheck disable=SC2317  # invoked by the trap
slurm_cleanup() {
  local rc=$?
  timeout 60 bash "$cluster" down >/dev/null 2>&1 || echo "cleanup: cluster down failed"
  rm -rf "$TMP"
  exit "$rc"
}
on1() { timeout -k 5 "$1" bash "$cluster" exec h1 "${@:2}"; }
