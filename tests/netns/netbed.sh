#!/usr/bin/env bash
# netbed: several "hosts" on this one machine, as Linux network namespaces joined by a bridge,
# each running its own sshd.  See tests/netns/README.md.
#
#   netbed.sh up N [--isolated K] [--hostnames] [--rate RATE]
#                                   hosts h1..hN on 10.77.0.0/24; h1..hK also on 10.78.0.0/24;
#                                   --hostnames: each host also has a UTS namespace whose host
#                                   name is h<i> (else all share this machine's); --rate: every
#                                   host sends at most RATE (tc's units: 10gbit) on eth0
#                                   (HVD_NETBED_RATE gives the default)
#   netbed.sh down                  kill everything in the bed, delete it; idempotent
#   netbed.sh exec HOST cmd...      run cmd inside HOST's namespace (HOST: h3 or 3)
#   netbed.sh status                what exists now
#   netbed.sh env                   shell assignments describing the bed (eval-able)
#
# Environment:
#   HVD_NETBED_PREFIX  names every namespace of the bed (default hvd): <prefix>br, <prefix>h1..
#   HVD_NETBED_DIR     state dir: keys, ssh_config, sshd configs/logs (default
#                      /tmp/hvd-netbed-<prefix>); deleted by down
#
# Nothing is changed in the root network namespace: the bridges live in their own namespace
# <prefix>br, and every veth is created there with its peer moved straight into a host.
# Sourcing this file defines netbed() (runs this script as a child process) and the
# NETBED_* variables, without running anything.
set -uo pipefail

NETBED_SELF=$(readlink -f "${BASH_SOURCE[0]}")
NETBED_PREFIX=${HVD_NETBED_PREFIX:-hvd}
NETBED_DIR=${HVD_NETBED_DIR:-/tmp/hvd-netbed-${NETBED_PREFIX}}
NETBED_SSH_CONFIG=$NETBED_DIR/ssh_config
NETBED_NET=10.77.0        # every host: 10.77.0.<i>/24 on eth0
NETBED_ISO_NET=10.78.0    # hosts 1..K: 10.78.0.<i>/24 on eth1
NETBED_MAX_HOSTS=200
# (60 s: under a loaded CI one login, with the user's shell start-up, took over 5 s)
NETBED_SSHD_DEADLINE_S=${HVD_NETBED_SSHD_DEADLINE_S:-60}

netbed() { bash "$NETBED_SELF" "$@"; }

source "$(dirname "$NETBED_SELF")/alive.sh"

_nb_log() { echo "netbed[$NETBED_PREFIX]: $*" >&2; }
_nb_die() {
  _nb_log "error: $*"
  exit 1
}

_nb_check_prefix() {
  [[ "$NETBED_PREFIX" =~ ^[A-Za-z][A-Za-z0-9_]{0,19}$ ]] ||
    _nb_die "HVD_NETBED_PREFIX '$NETBED_PREFIX' must be a letter then up to 19 of [A-Za-z0-9_]"
}

_nb_brns() { echo "${NETBED_PREFIX}br"; }
_nb_hostns() { echo "${NETBED_PREFIX}h$1"; }

# Every namespace of this bed that exists now (exact names only: <prefix>br, <prefix>h<digits>).
_nb_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^${NETBED_PREFIX}(br|h[0-9]+)\$" || true
}

# HOST given as h3, 3 or <prefix>h3 -> index 3
_nb_host_index() {
  local h=$1
  h=${h#"$NETBED_PREFIX"}
  h=${h#h}
  [[ "$h" =~ ^[0-9]+$ ]] || _nb_die "bad host '$1' (want h<i> or <i>)"
  echo "$h"
}

_nb_sshd_bin() {
  local s
  s=$(command -v sshd 2>/dev/null || true)
  [[ -n "$s" ]] || { [[ -x /usr/sbin/sshd ]] && s=/usr/sbin/sshd; }
  [[ -n "$s" ]] || _nb_die "sshd not found (apt-get install openssh-server)"
  echo "$s"
}

# ---------------------------------------------------------------------------------------- up
_nb_up_cleanup_on_failure() {
  local rc=$?
  if ((rc != 0)); then
    _nb_log "up failed (rc $rc); tearing down what was built"
    cmd_down || true
  fi
  exit "$rc"
}

_nb_run() { # run a command, name the host on failure
  local what=$1
  shift
  "$@" || _nb_die "$what: '$*' failed"
}

# _nb_in_host I CMD...: CMD in host I's namespace (and, in a bed made with --hostnames, in a
# UTS namespace named h<I>, which sshd passes on to every session).
_nb_in_host() {
  local i=$1
  shift
  if [[ -e "$NETBED_DIR/hostnames" ]]; then
    ip netns exec "$(_nb_hostns "$i")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$i" "$@"
  else
    ip netns exec "$(_nb_hostns "$i")" "$@"
  fi
}

cmd_up() {
  local n="" k=0 names=0 rate=${HVD_NETBED_RATE:-}
  while (($#)); do
    case $1 in
    --hostnames)
      names=1
      shift
      ;;
    --rate)
      [[ $# -ge 2 ]] || _nb_die "--rate needs RATE (e.g. 10gbit)"
      rate=$2
      shift 2
      ;;
    --isolated)
      [[ $# -ge 2 ]] || _nb_die "--isolated needs K"
      k=$2
      shift 2
      ;;
    --isolated=*)
      k=${1#*=}
      shift
      ;;
    *)
      [[ -z "$n" ]] || _nb_die "usage: up N [--isolated K]"
      n=$1
      shift
      ;;
    esac
  done
  if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > NETBED_MAX_HOSTS)); then
    _nb_die "usage: up N [--isolated K], 1 <= N <= $NETBED_MAX_HOSTS"
  fi
  if ! [[ "$k" =~ ^[0-9]+$ ]] || ((k > n)); then _nb_die "--isolated K needs 0 <= K <= N"; fi
  (($(id -u) == 0)) || _nb_die "must run as root (ip netns)"
  local sshd ns
  sshd=$(_nb_sshd_bin)
  command -v ssh >/dev/null || _nb_die "ssh not found (apt-get install openssh-client)"
  command -v ssh-keygen >/dev/null || _nb_die "ssh-keygen not found"
  ns=$(_nb_namespaces)
  [[ -z "$ns" ]] || _nb_die "a bed with prefix '$NETBED_PREFIX' exists ($(echo "$ns" | tr '\n' ' ')); run down first"
  if [[ -e "$NETBED_DIR" ]]; then
    [[ -e "$NETBED_DIR/.netbed" ]] || _nb_die "$NETBED_DIR exists and is not a netbed state dir"
    rm -rf -- "$NETBED_DIR"
  fi

  trap _nb_up_cleanup_on_failure EXIT
  # a signal ends up (after the current, bounded, child) and the EXIT trap tears down
  trap '_nb_log "up interrupted"; exit 130' INT
  trap '_nb_log "up terminated"; exit 143' TERM HUP
  local t0=$SECONDS
  mkdir -p "$NETBED_DIR" || _nb_die "cannot create $NETBED_DIR"
  chmod 700 "$NETBED_DIR"
  : >"$NETBED_DIR/.netbed"
  echo "$n $k" >"$NETBED_DIR/shape"
  [[ -z $rate ]] || echo "$rate" >"$NETBED_DIR/rate"
  ((names)) && : >"$NETBED_DIR/hostnames"
  mkdir -p /run/sshd # sshd's privilege-separation dir (Debian's path); harmless if present

  # keys: one host key shared by every host of the bed, one client key
  _nb_run "host key" ssh-keygen -q -t ed25519 -N '' -C "netbed-$NETBED_PREFIX-host" -f "$NETBED_DIR/host_key"
  _nb_run "client key" ssh-keygen -q -t ed25519 -N '' -C "netbed-$NETBED_PREFIX-client" -f "$NETBED_DIR/id_ed25519"
  cp "$NETBED_DIR/id_ed25519.pub" "$NETBED_DIR/authorized_keys"

  # the bridge namespace and its bridges
  local br
  br=$(_nb_brns)
  _nb_run "bridge ns $br" ip netns add "$br"
  _nb_run "bridge ns $br" ip -n "$br" link set lo up
  _nb_run "bridge ns $br" ip -n "$br" link add br0 type bridge stp_state 0
  _nb_run "bridge ns $br" ip -n "$br" link set br0 up
  if ((k > 0)); then
    _nb_run "bridge ns $br" ip -n "$br" link add br1 type bridge stp_state 0
    _nb_run "bridge ns $br" ip -n "$br" link set br1 up
  fi

  # ssh client config: names for the hosts live here, not in /etc/hosts (shared by all netns)
  {
    echo "# netbed $NETBED_PREFIX: ssh -F $NETBED_SSH_CONFIG h1 ..."
    local i
    for ((i = 1; i <= n; i++)); do
      printf 'Host h%d\n  HostName %s.%d\n' "$i" "$NETBED_NET" "$i"
      if ((i <= k)); then printf 'Host h%d-iso\n  HostName %s.%d\n' "$i" "$NETBED_ISO_NET" "$i"; fi
    done
    cat <<EOF
Host *
  User root
  Port 22
  IdentityFile $NETBED_DIR/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking no
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
  ServerAliveInterval 5
  ServerAliveCountMax 3
EOF
  } >"$NETBED_DIR/ssh_config"
  mkdir -p "$NETBED_DIR/bin"
  cat >"$NETBED_DIR/bin/ssh" <<EOF
#!/bin/sh
exec $(command -v ssh) -F $NETBED_SSH_CONFIG "\$@"
EOF
  chmod 755 "$NETBED_DIR/bin/ssh"

  # host names for programs inside the bed: `ip netns exec NS` bind-mounts /etc/netns/NS/hosts
  # over /etc/hosts for what it runs (sshd, and so every session), so h<i> resolves there
  # without touching this machine's /etc/hosts
  local hosts_file=$NETBED_DIR/hosts
  {
    echo "127.0.0.1 localhost"
    for ((i = 1; i <= n; i++)); do
      echo "$NETBED_NET.$i h$i"
      if ((i <= k)); then echo "$NETBED_ISO_NET.$i h$i-iso"; fi
    done
  } >"$hosts_file"

  # the hosts
  local i h hd
  for ((i = 1; i <= n; i++)); do
    h=$(_nb_hostns "$i")
    hd=$NETBED_DIR/h$i
    mkdir -p "$hd" "/etc/netns/$h"
    cp "$hosts_file" "/etc/netns/$h/hosts"
    _nb_run "h$i" ip netns add "$h"
    _nb_run "h$i" ip -n "$h" link set lo up
    # answer ARP only for addresses of the interface asked on, so a host that is not on
    # 10.78.0.0/24 cannot reach it through 10.77.0.0/24 even with a hand-made on-link route
    _nb_run "h$i" ip netns exec "$h" sysctl -q -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
    _nb_run "h$i" ip -n "$br" link add "h${i}a" type veth peer name eth0 netns "$h"
    _nb_run "h$i" ip -n "$br" link set "h${i}a" master br0 up
    _nb_run "h$i" ip -n "$h" addr add "$NETBED_NET.$i/24" dev eth0
    _nb_run "h$i" ip -n "$h" link set eth0 up
    if [[ -n $rate ]]; then
      # A link of RATE: a token bucket on what the host sends (each direction of a pair of
      # hosts passes one). This kernel has no netem or fq, so a delay cannot be added: the
      # rate alone makes a byte between hosts cost more than one inside a host. A burst of
      # 64 KiB (one GSO packet; larger bursts let short messages through at veth speed) and
      # room for 100 ms of queue, so that TCP sees a slow link rather than drops.
      _nb_run "h$i: tc tbf $rate" ip netns exec "$h" tc qdisc replace dev eth0 root tbf \
        rate "$rate" burst 64kb latency 100ms
    fi
    if ((i <= k)); then
      _nb_run "h$i" ip -n "$br" link add "h${i}b" type veth peer name eth1 netns "$h"
      _nb_run "h$i" ip -n "$br" link set "h${i}b" master br1 up
      _nb_run "h$i" ip -n "$h" addr add "$NETBED_ISO_NET.$i/24" dev eth1
      _nb_run "h$i" ip -n "$h" link set eth1 up
    fi
    {
      echo "# netbed $NETBED_PREFIX host h$i"
      echo "ListenAddress 127.0.0.1"
      echo "ListenAddress $NETBED_NET.$i"
      if ((i <= k)); then echo "ListenAddress $NETBED_ISO_NET.$i"; fi
      cat <<EOF
Port 22
HostKey $NETBED_DIR/host_key
PidFile $hd/sshd.pid
AuthorizedKeysFile $NETBED_DIR/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxStartups 200:30:400
MaxSessions 200
AcceptEnv HVD_* HOROVOD_* LANG LC_*
# SHLVL=1: bash started by sshd reads ~/.bashrc only at shell level 1; this machine's
# (pyenv's init, a hundred processes) made every session cost 0.9 s of the bed's time
SetEnv HVD_NETBED_HOST=h$i HVD_NETBED_PREFIX=$NETBED_PREFIX SHLVL=1
EOF
    } >"$hd/sshd_config"
    _nb_run "h$i: sshd config check" "$sshd" -t -f "$hd/sshd_config"
    # sshd daemonizes (and writes PidFile); it stays in the namespace until down
    _nb_run "h$i: start sshd" _nb_in_host "$i" "$sshd" -f "$hd/sshd_config" -E "$hd/sshd.log"
  done

  # readiness: each host can ssh to itself on its bridge address, within one shared deadline
  local deadline=$((SECONDS + NETBED_SSHD_DEADLINE_S)) ready
  for ((i = 1; i <= n; i++)); do
    h=$(_nb_hostns "$i")
    ready=0
    while ((SECONDS < deadline)); do
      # a try may take long (a loaded machine, the user's shell start-up): it is bounded by
      # the shared deadline, not cut short and retried from scratch
      if timeout $((deadline - SECONDS > 1 ? deadline - SECONDS : 1)) ip netns exec "$h" \
        ssh -F "$NETBED_SSH_CONFIG" -o ConnectTimeout=5 "h$i" true \
        </dev/null >/dev/null 2>&1; then
        ready=1
        break
      fi
      sleep 0.1
    done
    ((ready)) || _nb_die "h$i: sshd not reachable at $NETBED_NET.$i:22 within ${NETBED_SSHD_DEADLINE_S}s (log: $NETBED_DIR/h$i/sshd.log: $(tail -n 3 "$NETBED_DIR/h$i/sshd.log" 2>/dev/null | tr '\n' ' '))"
  done

  cmd_env >"$NETBED_DIR/env"
  trap - EXIT INT TERM HUP
  _nb_log "up: $n hosts ($k isolated) in $((SECONDS - t0))s; ssh -F $NETBED_SSH_CONFIG h1; state $NETBED_DIR"
}

# -------------------------------------------------------------------------------------- down
_nb_bed_pids() { # every process in the bed's namespaces, and any sshd using its configs
  local ns p
  {
    for ns in $(_nb_namespaces); do ip netns pids "$ns" 2>/dev/null || true; done
    if [[ -n "$NETBED_DIR" && "$NETBED_DIR" != / ]]; then
      pgrep -f "sshd.* -f $NETBED_DIR/h[0-9]+/sshd_config" 2>/dev/null || true
    fi
  } | sort -un | while read -r p; do
    [[ "$p" == "$$" || "$p" == "$BASHPID" || "$p" == "$PPID" ]] || echo "$p"
  done
}

cmd_down() {
  _nb_check_prefix
  local pids ns deadline sig
  for sig in TERM KILL; do
    pids=$(_nb_bed_pids)
    [[ -n "$pids" ]] || break
    # shellcheck disable=SC2086
    kill -s "$sig" $pids 2>/dev/null || true
    deadline=$((SECONDS + 5))
    # shellcheck disable=SC2086
    while pid_alive $pids && ((SECONDS < deadline)); do sleep 0.05; done
  done
  pids=$(_nb_bed_pids)
  [[ -z "$pids" ]] || _nb_log "warning: processes survived SIGKILL: $(echo "$pids" | tr '\n' ' ')"
  local failed=0
  # deleting a namespace deletes its interfaces; veth peers in the other namespace go too
  for ns in $(_nb_namespaces); do
    ip netns del "$ns" 2>/dev/null || { ip netns del "$ns" 2>/dev/null || {
      _nb_log "error: cannot delete namespace $ns"
      failed=1
    }; }
  done
  # the per-namespace /etc files (only ours: the prefix names them)
  for ns in /etc/netns/"$NETBED_PREFIX"h[0-9]*; do
    [[ -d "$ns" ]] && rm -rf -- "$ns"
  done
  if [[ -e "$NETBED_DIR/.netbed" ]]; then
    rm -rf -- "$NETBED_DIR"
  elif [[ -e "$NETBED_DIR" ]]; then
    _nb_log "warning: $NETBED_DIR has no .netbed marker; not deleting it"
  fi
  return "$failed"
}

# ------------------------------------------------------------------------------ exec, status
cmd_exec() {
  [[ $# -ge 2 ]] || _nb_die "usage: exec HOST cmd..."
  local i h
  i=$(_nb_host_index "$1")
  shift
  h=$(_nb_hostns "$i")
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$h" || _nb_die "h$i: no such host (namespace $h)"
  _nb_in_host "$i" "$@"
  exit $?
}

cmd_env() {
  local n=0 k=0 hosts="" i
  if [[ -r "$NETBED_DIR/shape" ]]; then read -r n k <"$NETBED_DIR/shape"; fi
  for ((i = 1; i <= n; i++)); do hosts+="${hosts:+ }h$i"; done
  printf 'NETBED_PREFIX=%q\nNETBED_DIR=%q\nNETBED_SSH_CONFIG=%q\nNETBED_SSH_BIN=%q\n' \
    "$NETBED_PREFIX" "$NETBED_DIR" "$NETBED_SSH_CONFIG" "$NETBED_DIR/bin"
  printf 'NETBED_N=%d\nNETBED_ISOLATED=%d\nNETBED_HOSTS=%q\n' "$n" "$k" "$hosts"
}

cmd_status() {
  _nb_check_prefix
  local ns any=0 pid
  echo "prefix $NETBED_PREFIX, state dir $NETBED_DIR$([[ -e "$NETBED_DIR/.netbed" ]] || echo ' (absent)')"
  for ns in $(_nb_namespaces); do
    any=1
    if [[ "$ns" == "$(_nb_brns)" ]]; then
      echo "$ns: bridges $(ip -n "$ns" -o link show type bridge 2>/dev/null | awk -F': ' '{printf "%s ", $2}')"
      continue
    fi
    pid=""
    [[ -r "$NETBED_DIR/${ns#"$NETBED_PREFIX"}/sshd.pid" ]] && pid=$(cat "$NETBED_DIR/${ns#"$NETBED_PREFIX"}/sshd.pid")
    local sshd_state="sshd down"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && sshd_state="sshd pid $pid"
    echo "$ns: $(ip -n "$ns" -4 -o addr show scope global 2>/dev/null | awk '{printf "%s %s  ", $2, $4}')$sshd_state, $(ip netns pids "$ns" 2>/dev/null | wc -l) processes"
  done
  ((any)) || echo "no namespaces"
}

netbed_main() {
  set -uo pipefail
  _nb_check_prefix
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  exec) cmd_exec "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *)
    sed -n '2,9p' "$NETBED_SELF" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  netbed_main "$@"
fi
