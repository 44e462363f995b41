#!/usr/bin/env bash
# cluster.sh: a real Slurm cluster on this one machine, on the hosts of a tests/netns bed.
# See tests/slurm/README.md.
#
#   cluster.sh up N          bed h1..hN (netbed.sh up N --hostnames), one munged, slurmctld
#                            on h1, a slurmd on every host; returns when sinfo shows N idle
#   cluster.sh down          stop every daemon and step, take the bed down, delete the state
#                            dir; idempotent
#   cluster.sh env           KEY=value lines a test needs (SLURM_CONF, HVD_NETBED_*, ...)
#   cluster.sh status        what runs now, and sinfo
#   cluster.sh exec HOST cmd...   cmd inside HOST with SLURM_CONF set (srun, sinfo, ...)
#
# Environment:
#   HVD_NETBED_PREFIX      the bed's prefix (default hvdslurm; see tests/netns/netbed.sh)
#   HVD_NETBED_DIR         the bed's state dir (default /tmp/hvd-netbed-<prefix>)
#   HVD_SLURM_DIR          this cluster's state dir (default /tmp/hvd-slurm-<prefix>)
#   HVD_SLURM_CPUS         CPUs per node in slurm.conf (default 2; need not match the machine)
#   HVD_SLURM_DEADLINE_S   bound on each wait of up (default 30)
set -euo pipefail

SC_SELF=$(readlink -f "${BASH_SOURCE[0]}")
SC_NETBED=$(dirname "$SC_SELF")/../netns/netbed.sh
source "$(dirname "$SC_SELF")/../netns/alive.sh"
export HVD_NETBED_PREFIX=${HVD_NETBED_PREFIX:-hvdslurm}
export HVD_NETBED_DIR=${HVD_NETBED_DIR:-/tmp/hvd-netbed-${HVD_NETBED_PREFIX}}
SC_PREFIX=$HVD_NETBED_PREFIX
SC_DIR=${HVD_SLURM_DIR:-/tmp/hvd-slurm-${SC_PREFIX}}
SC_CONF=$SC_DIR/slurm.conf
SC_MUNGE_DIR=$SC_DIR/munge       # 0700: key (0400), seed, log
SC_RUN_DIR=$SC_DIR/run           # 0755 (munged wants its socket dir executable by all)
SC_MUNGE_SOCKET=$SC_RUN_DIR/munge.socket
SC_CPUS=${HVD_SLURM_CPUS:-2}
SC_DEADLINE_S=${HVD_SLURM_DEADLINE_S:-30}
SC_NET=10.77.0 # netbed's main net: host i is 10.77.0.<i>

_sc_log() { echo "slurm-cluster[$SC_PREFIX]: $*" >&2; }
_sc_die() {
  _sc_log "error: $*"
  exit 1
}

_sc_netbed() { bash "$SC_NETBED" "$@"; }

# CMD inside host I's network namespace only (no UTS namespace): for client commands of
# this script (scontrol, sinfo), which need to reach 10.77.0.1 and nothing else
_sc_in_ns() {
  local i=$1
  shift
  SLURM_CONF=$SC_CONF ip netns exec "${SC_PREFIX}h$i" "$@"
}

_sc_pidfile_alive() { # pid from a pid file, if that process is alive
  local p
  [[ -r "$1" ]] || return 1
  p=$(tr -dc '0-9' <"$1")
  [[ -n "$p" ]] && pid_alive "$p" && echo "$p"
}

_sc_tail() { tail -n "${2:-3}" "$1" 2>/dev/null | tr '\n' ' ' || true; }

# ---------------------------------------------------------------------------------------- up
_sc_up_cleanup_on_failure() {
  local rc=$?
  if ((rc != 0)); then
    _sc_log "up failed (rc $rc); tearing down what was built"
    cmd_down || true
  fi
  exit "$rc"
}

_sc_write_conf() {
  local n=$1 i cluster
  cluster=$(echo "$SC_PREFIX" | tr '[:upper:]' '[:lower:]')
  {
    cat <<EOF
# slurm.conf of the test cluster $SC_PREFIX (tests/slurm/cluster.sh); everything under $SC_DIR
ClusterName=$cluster
SlurmctldHost=h1($SC_NET.1)
SlurmUser=root
SlurmdUser=root
# one munged for the whole bed, on its own socket (auth/munge and cred/munge both read it)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SC_MUNGE_SOCKET
StateSaveLocation=$SC_DIR/ctld/state
SlurmctldPidFile=$SC_DIR/ctld/slurmctld.pid
SlurmctldLogFile=$SC_DIR/ctld/slurmctld.log
SlurmctldDebug=info
SlurmdSpoolDir=$SC_DIR/%n/spool
SlurmdPidFile=$SC_DIR/%n/slurmd.pid
SlurmdLogFile=$SC_DIR/%n/slurmd.log
SlurmdDebug=info
# a node's temporary dir (the PMIx plugin puts its per-step client dir there; a shared /tmp
# would have all nodes of a step race for the same name)
TmpFS=$SC_DIR/%n/tmp
# the CPUs below count, whatever this machine has
SlurmdParameters=config_overrides
# no cgroups: processes tracked by parent pid; binding by sched_setaffinity (task/affinity)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
# quick tests: a node whose slurmd comes back is usable again; short waits everywhere
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
TCPTimeout=2
KillWait=2
MinJobAge=5
InactiveLimit=0
Waittime=0
EOF
    for ((i = 1; i <= n; i++)); do
      echo "NodeName=h$i NodeAddr=$SC_NET.$i NodeHostname=h$i CPUs=$SC_CPUS State=UNKNOWN"
    done
    echo "PartitionName=hvd Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP"
  } >"$SC_CONF"
  # slurmd initializes a cgroup plugin even when nothing uses it; autodetection looks at
  # /sys/fs/cgroup, which `ip netns exec` hides under a fresh sysfs. Naming v1 skips the
  # detection, and v1 touches no cgroup until a plugin asks (none does: linuxproc, task/affinity)
  echo "CgroupPlugin=cgroup/v1" >"$SC_DIR/cgroup.conf"
}

cmd_up() {
  if ! [[ $# -eq 1 && "$1" =~ ^[0-9]+$ ]] || (($1 < 1 || $1 > 64)); then
    _sc_die "usage: up N (1 <= N <= 64)"
  fi
  [[ "$SC_CPUS" =~ ^[1-9][0-9]*$ ]] || _sc_die "HVD_SLURM_CPUS must be a positive integer"
  local n=$1 t0=$SECONDS b
  (($(id -u) == 0)) || _sc_die "must run as root (ip netns, the daemons)"
  for b in munged munge unmunge slurmctld slurmd slurmstepd srun sinfo scontrol; do
    command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
      _sc_die "$b not found (scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)"
  done
  # refuse before the failure trap is set, so that a refusal leaves an existing cluster alone
  if ip netns list 2>/dev/null | awk '{print $1}' | grep -qE "^${SC_PREFIX}(br|h[0-9]+)\$"; then
    _sc_die "a bed with prefix '$SC_PREFIX' exists; run down first"
  fi
  if [[ -e "$SC_DIR" && ! -e "$SC_DIR/.slurmcluster" ]]; then
    _sc_die "$SC_DIR exists and is not a cluster state dir"
  fi
  ((${#SC_MUNGE_SOCKET} < 100)) || _sc_die "munge socket path too long for a unix socket: $SC_MUNGE_SOCKET"

  trap _sc_up_cleanup_on_failure EXIT
  trap '_sc_log "up interrupted"; exit 130' INT
  trap '_sc_log "up terminated"; exit 143' TERM HUP

  # the hosts (netbed refuses to start over an existing bed of this prefix)
  _sc_netbed up "$n" --hostnames || _sc_die "netbed up $n failed"
  local t_bed=$SECONDS

  rm -rf -- "$SC_DIR"
  mkdir -p "$SC_DIR"
  chmod 755 "$SC_DIR"
  : >"$SC_DIR/.slurmcluster"
  echo "$n" >"$SC_DIR/shape"
  mkdir -m 700 "$SC_MUNGE_DIR"
  mkdir -m 755 "$SC_RUN_DIR"
  mkdir -p "$SC_DIR/ctld/state"
  local i
  for ((i = 1; i <= n; i++)); do mkdir -p "$SC_DIR/h$i/spool" "$SC_DIR/h$i/tmp"; done
  _sc_write_conf "$n"

  # munged: one for the bed, in h1's namespaces (so netbed down would reach it too); its
  # socket is a path, which works from every network namespace
  dd if=/dev/urandom of="$SC_MUNGE_DIR/munge.key" bs=1024 count=1 status=none
  chmod 400 "$SC_MUNGE_DIR/munge.key"
  _sc_netbed exec h1 munged --key-file="$SC_MUNGE_DIR/munge.key" --socket="$SC_MUNGE_SOCKET" \
    --pid-file="$SC_RUN_DIR/munged.pid" --log-file="$SC_MUNGE_DIR/munged.log" \
    --seed-file="$SC_MUNGE_DIR/munged.seed" </dev/null >>"$SC_MUNGE_DIR/munged.out" 2>&1 ||
    _sc_die "munged did not start: $(_sc_tail "$SC_MUNGE_DIR/munged.out") $(_sc_tail "$SC_MUNGE_DIR/munged.log")"
  local deadline=$((SECONDS + SC_DEADLINE_S))
  until munge -n -S "$SC_MUNGE_SOCKET" 2>/dev/null | unmunge -S "$SC_MUNGE_SOCKET" >/dev/null 2>&1; do
    ((SECONDS < deadline)) ||
      _sc_die "munged: no credential round trip on $SC_MUNGE_SOCKET within ${SC_DEADLINE_S}s (log: $(_sc_tail "$SC_MUNGE_DIR/munged.log"))"
    sleep 0.1
  done

  # slurmctld on h1 (daemonizes, writes its pid file); -c: no state from an earlier run
  _sc_netbed exec h1 slurmctld -c -f "$SC_CONF" </dev/null >>"$SC_DIR/ctld/slurmctld.out" 2>&1 ||
    _sc_die "slurmctld did not start: $(_sc_tail "$SC_DIR/ctld/slurmctld.out") $(_sc_tail "$SC_DIR/ctld/slurmctld.log")"
  deadline=$((SECONDS + SC_DEADLINE_S))
  until timeout 10 ip netns exec "${SC_PREFIX}h1" env SLURM_CONF="$SC_CONF" scontrol ping 2>/dev/null | grep -q 'is UP'; do
    ((SECONDS < deadline)) ||
      _sc_die "slurmctld on h1 ($SC_NET.1:6817) not answering within ${SC_DEADLINE_S}s (log $SC_DIR/ctld/slurmctld.log: $(_sc_tail "$SC_DIR/ctld/slurmctld.log"))"
    sleep 0.2
  done
  local t_ctld=$SECONDS

  # a slurmd per host, in the host's network and UTS namespaces (so its tasks see hostname h<i>)
  for ((i = 1; i <= n; i++)); do
    _sc_netbed exec "h$i" slurmd -N "h$i" -f "$SC_CONF" </dev/null >>"$SC_DIR/h$i/slurmd.out" 2>&1 ||
      _sc_die "h$i: slurmd did not start: $(_sc_tail "$SC_DIR/h$i/slurmd.out") $(_sc_tail "$SC_DIR/h$i/slurmd.log")"
  done
  deadline=$((SECONDS + SC_DEADLINE_S))
  local states idle
  while :; do
    states=$(timeout 10 ip netns exec "${SC_PREFIX}h1" env SLURM_CONF="$SC_CONF" sinfo -h -N -o '%N %T' 2>/dev/null || true)
    idle=$(awk '$2 == "idle" {c++} END {print c + 0}' <<<"$states")
    ((idle == n)) && break
    if ((SECONDS >= deadline)); then
      local why="" h
      for ((i = 1; i <= n; i++)); do
        h=$(awk -v h="h$i" '$1 == h {print $2}' <<<"$states")
        [[ "$h" == idle ]] && continue
        why+=" h$i: ${h:-unknown} (slurmd log: $(_sc_tail "$SC_DIR/h$i/slurmd.log" 2));"
      done
      _sc_die "nodes not idle within ${SC_DEADLINE_S}s:$why"
    fi
    sleep 0.2
  done

  cmd_env >"$SC_DIR/env"
  trap - EXIT INT TERM HUP
  _sc_log "up: $n nodes idle in $((SECONDS - t0))s (bed $((t_bed - t0))s, munged+slurmctld $((t_ctld - t_bed))s, slurmds $((SECONDS - t_ctld))s); SLURM_CONF=$SC_CONF"
}

# -------------------------------------------------------------------------------------- down
# Slurm's processes of this cluster: by name in the bed's host namespaces (daemons, steps and
# clients: an srun whose controller is gone would sit out netbed's SIGTERM), plus any daemon
# whose command line names this cluster's files (found even if the namespaces are gone)
_sc_daemon_pids() {
  local inodes="" ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${SC_PREFIX}h[0-9]+\$" || true); do
    inodes+=" $(stat -L -c %i "/run/netns/$ns" 2>/dev/null || true)"
  done
  {
    ps -e -o pid=,netns=,comm= 2>/dev/null | awk -v ns="$inodes" '
      BEGIN { n = split(ns, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
      ($2 in want) && $3 ~ /^(slurmctld|slurmd|slurmstepd|munged|srun|salloc|sbatch|sattach)$/ { print $1 }'
    pgrep -f -- "-f $SC_CONF\$|--socket=$SC_MUNGE_SOCKET " 2>/dev/null || true
  } | sort -un | while read -r p; do
    [[ "$p" == "$$" || "$p" == "$BASHPID" ]] || echo "$p"
  done
}

cmd_down() {
  local pids deadline rc=0
  # SIGKILL at once: nothing of the daemons' state outlives down (the state dir goes), and a
  # slurmstepd's tasks are killed with the bed below
  pids=$(_sc_daemon_pids)
  if [[ -n "$pids" ]]; then
    # shellcheck disable=SC2086
    kill -s KILL $pids 2>/dev/null || true
    deadline=$((SECONDS + 5))
    # shellcheck disable=SC2086
    while pid_alive $pids && ((SECONDS < deadline)); do sleep 0.05; done
    # shellcheck disable=SC2086
    if pid_alive $pids; then _sc_log "warning: survived SIGKILL: $(tr '\n' ' ' <<<"$pids")"; fi
  fi
  _sc_netbed down || rc=1
  # the daemons were reparented to init; give it a moment (bounded) to reap them, so that a
  # check right after down finds no zombie slurmd either
  local p
  deadline=$((SECONDS + 3))
  for p in $pids; do
    while [[ -e /proc/$p ]] && ((SECONDS < deadline)); do sleep 0.05; done
  done
  if [[ -e "$SC_DIR/.slurmcluster" ]]; then
    rm -rf -- "$SC_DIR"
  elif [[ -e "$SC_DIR" ]]; then
    _sc_log "warning: $SC_DIR has no .slurmcluster marker; not deleting it"
  fi
  return "$rc"
}

# ------------------------------------------------------------------------ env, status, exec
cmd_env() {
  local n=0
  [[ -r "$SC_DIR/shape" ]] && read -r n <"$SC_DIR/shape"
  printf 'SLURM_CONF=%q\nHVD_SLURM_DIR=%q\nHVD_SLURM_N=%d\nHVD_SLURM_MUNGE_SOCKET=%q\n' \
    "$SC_CONF" "$SC_DIR" "$n" "$SC_MUNGE_SOCKET"
  printf 'HVD_NETBED_PREFIX=%q\nHVD_NETBED_DIR=%q\n' "$HVD_NETBED_PREFIX" "$HVD_NETBED_DIR"
  _sc_netbed env
}

_sc_state() { if [[ -n "$1" ]]; then echo "pid $1"; else echo down; fi; }

cmd_status() {
  local n=0 i p
  echo "cluster $SC_PREFIX, state dir $SC_DIR$([[ -e "$SC_DIR/.slurmcluster" ]] || echo ' (absent)')"
  [[ -r "$SC_DIR/shape" ]] && read -r n <"$SC_DIR/shape"
  p=$(_sc_pidfile_alive "$SC_RUN_DIR/munged.pid" || true)
  echo "munged: $(_sc_state "$p") ($SC_MUNGE_SOCKET)"
  p=$(_sc_pidfile_alive "$SC_DIR/ctld/slurmctld.pid" || true)
  echo "slurmctld (h1): $(_sc_state "$p")"
  for ((i = 1; i <= n; i++)); do
    p=$(_sc_pidfile_alive "$SC_DIR/h$i/slurmd.pid" || true)
    echo "slurmd h$i: $(_sc_state "$p")"
  done
  if ((n > 0)) && ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "${SC_PREFIX}h1"; then
    timeout 10 ip netns exec "${SC_PREFIX}h1" env SLURM_CONF="$SC_CONF" sinfo -N || true
  fi
  _sc_netbed status
}

cmd_exec() {
  [[ $# -ge 2 ]] || _sc_die "usage: exec HOST cmd..."
  [[ -r "$SC_CONF" ]] || _sc_die "no cluster ($SC_CONF missing); run up first"
  SLURM_CONF=$SC_CONF exec bash "$SC_NETBED" exec "$@"
}

sc_main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  exec) cmd_exec "$@" ;;
  *)
    sed -n '2,12p' "$SC_SELF" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  sc_main "$@"
fi
