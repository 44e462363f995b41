# Shared by the tests in tests/netns: the prerequisites (skip with exit 77 and a message
# naming what is missing, only where the machine cannot run them), a bed of our own that is
# torn down however the test ends, and running commands on its hosts.
#
#   source lib.sh; netns_require NAME; netns_bed_up N [--isolated K]; on h1 CMD...
# A test may set netns_tmp to a directory that the cleanup removes too.

# set -e alone ends a test without a word: name the command and line that stopped it (as
# tests/e2e/lib.sh does; not inherited by functions, whose expected failures would be noise)
trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

netns_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
netbed=$netns_here/netbed.sh
source "$netns_here/alive.sh"

netns_skip() {
  echo "SKIP: $netns_name: $*"
  exit 77
}

netns_require() { # NAME: the test's name for messages
  netns_name=$1
  (($(id -u) == 0)) || netns_skip "needs root (ip netns)"
  command -v ip >/dev/null || netns_skip "ip (iproute2) not installed"
  ip netns list >/dev/null 2>&1 || netns_skip "ip netns unavailable"
  command -v sshd >/dev/null || [[ -x /usr/sbin/sshd ]] || netns_skip "sshd not installed (openssh-server)"
  command -v ssh >/dev/null || netns_skip "ssh not installed (openssh-client)"
  command -v timeout >/dev/null || netns_skip "timeout (coreutils) not installed"
  local probe="hvdprobe$$"
  ip netns add "$probe" >/dev/null 2>&1 || netns_skip "cannot create a network namespace"
  ip netns del "$probe"
  # a prefix of our own so parallel tests and a developer's bed do not collide
  export HVD_NETBED_PREFIX=${HVD_NETBED_PREFIX:-hvd$$}
  export HVD_NETBED_DIR=${HVD_NETBED_DIR:-/tmp/hvd-netbed-$HVD_NETBED_PREFIX}
}

netns_downed=1
# shellcheck disable=SC2317  # invoked by the trap
netns_cleanup() {
  local rc=$?
  [[ -n "${netns_tmp:-}" && -d "$netns_tmp" ]] && rm -rf "$netns_tmp"
  if ((!netns_downed)); then
    timeout 60 bash "$netbed" down || echo "cleanup: netbed down failed"
    netns_downed=1
  fi
  exit "$rc"
}

netns_bed_up() { # N [--isolated K]
  trap netns_cleanup EXIT
  trap 'echo "interrupted"; exit 130' INT TERM HUP
  netns_downed=0
  timeout 120 bash "$netbed" up "$@" || {
    echo "FAIL: $netns_name: netbed up $*"
    exit 1
  }
  # programs on the bed find the hosts by name through its ssh wrapper and /etc/netns hosts
  export PATH="$HVD_NETBED_DIR/bin:$PATH"
}

# on HOST CMD...: run CMD inside host HOST's namespace (stdin from /dev/null)
on() {
  local h=$1
  shift
  ip netns exec "${HVD_NETBED_PREFIX}$h" "$@" </dev/null
}

# pids of every process in the bed's host namespaces except the sshd listeners
netns_bed_procs() {
  local ns p
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${HVD_NETBED_PREFIX}h[0-9]+\$"); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == sshd ]] && grep -q listener "/proc/$p/cmdline" 2>/dev/null && continue
      [[ -e /proc/$p ]] && echo "$p"
    done
  done
  return 0 # not the status of the last process's test (a gone process is no failure)
}

# bed_settles SECONDS: wait until no process of the bed's hosts is left (sshd listeners aside);
# 0, or 1 with what is left in $left
bed_settles() {
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    left=$(netns_bed_procs)
    [[ -z "$left" ]] && return 0
    sleep 0.1
  done
  left=$(netns_bed_procs)
  [[ -z "$left" ]]
}

# driver_port FILE: the NIC discovery driver's port, once horovodrun --verbose wrote it to FILE
# (5 s at most; empty if it never did)
driver_port() {
  local port="" i
  for ((i = 0; i < 100; i++)); do
    port=$(sed -n 's/^Driver service listening on port \([0-9]*\) .*/\1/p' "$1")
    [[ -n "$port" ]] && break
    sleep 0.05
  done
  echo "$port"
}

# For the horovodrun tests (they set HVDRUN and TMP):
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() { echo "ok   $*"; }

# commits_only_grow FILE: the elastic worker's commit counter in FILE (rank 0's "commit N"
# lines) only ever grew, through every reset.
commits_only_grow() {
  local c prev=-1
  for c in $(grep -ao 'commit [0-9]*' "$1" | awk '{print $2}'); do
    ((c > prev)) || fail "commit counter went from $prev to $c"
    prev=$c
  done
}

# wait_until DEADLINE_S CMD...: poll CMD every 50 ms until it succeeds or the deadline passes.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# run_on_h1 ARGS...: horovodrun on h1, in $TMP, with a deadline; sets OUT, ERR, RC
run_on_h1() {
  set +e
  (cd "$TMP" && on h1 timeout -k 5 120 "$HVDRUN" "$@" >"$TMP/out" 2>"$TMP/err")
  RC=$?
  set -e
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
}
