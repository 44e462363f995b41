#!/usr/bin/env bash
# How long `horovodrun --check-network` takes across several hosts, simulated on this machine:
# network namespaces with sshd each (tests/netns/netbed.sh), horovodrun on h1. Each run times
# the check of every host three ways, one after the other:
#   healthy   every link works (every host is on two networks, eth0 and eth1)
#   dropped   h2's eth1 drops everything it receives (each probe of h2 and by h2 on eth1
#             waits out its 1.5 s; eth0 still works everywhere: exit 0)
#   filtered  the last host drops new connections to its ephemeral ports (its task
#             service's), on both networks (no interface works on every link: exit 1)
# and prints the median, min and max wall time of each, with the check's exit status (0: some
# interface works on every link; 1: none does).
#
# Usage: tools/bench_check_network.sh [--build DIR] [--hosts 8] [--runs 5]
# Needs root, iproute2, iptables and openssh (scripts/install-deps.sh). A benchmark, not a test.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${here%/tools}
build=$root/build hosts=8 runs=5
while (($#)); do
  case $1 in
    --build) build=$(cd "${2:?}" && pwd); shift ;;
    --hosts) hosts=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    -h | --help) sed -n '2,14s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench_check_network: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $hosts =~ ^[1-9][0-9]*$ && $hosts -ge 3 && $runs =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench_check_network: --hosts takes a count of 3 or more, --runs a positive count" >&2; exit 2; }
(($(id -u) == 0)) || { echo "bench_check_network: needs root (ip netns)" >&2; exit 2; }
command -v iptables >/dev/null || { echo "bench_check_network: needs iptables" >&2; exit 2; }

export HVD_NETBED_PREFIX=hvdcn$$
export HVD_NETBED_DIR=/tmp/hvd-netbed-$HVD_NETBED_PREFIX
netbed=$root/tests/netns/netbed.sh
trap 'timeout 60 bash "$netbed" down >/dev/null || echo "bench_check_network: netbed down failed" >&2' EXIT
trap 'exit 130' INT TERM HUP
bash "$netbed" up "$hosts" --isolated "$hosts" >/dev/null
export PATH="$HVD_NETBED_DIR/bin:$PATH"
on() { local h=$1; shift; ip netns exec "${HVD_NETBED_PREFIX}$h" "$@" </dev/null; }
spec=""
for ((i = 1; i <= hosts; i++)); do spec+="${spec:+,}h$i:1"; done

declare -A times codes
check() { # NAME: one timed check, appended to times[NAME]
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  on h1 timeout 60 "$build/horovodrun" --check-network -H "$spec" >/dev/null 2>&1 || rc=$?
  t1=$(date +%s.%N)
  times[$1]+="$(awk "BEGIN { print $t1 - $t0 }") "
  codes[$1]+="$rc "
}
for ((r = 0; r < runs; r++)); do
  check healthy
  on h2 iptables -A INPUT -i eth1 -j DROP
  check dropped
  on h2 iptables -F INPUT
  on "h$hosts" iptables -A INPUT -p tcp --syn --dport 32768:60999 -j DROP
  check filtered
  on "h$hosts" iptables -F INPUT
done
echo "horovodrun --check-network, $hosts hosts (netns), $runs runs, $(date -u +%Y-%m-%d), $(nproc) cores"
printf '%-9s %8s %8s %8s  %s\n' case median min max "exit codes"
for c in healthy dropped filtered; do
  read -r -a v <<<"${times[$c]}"
  sorted=$(printf '%s\n' "${v[@]}" | sort -n)
  n=${#v[@]}
  median=$(sed -n "$(((n + 1) / 2))p" <<<"$sorted")
  printf '%-9s %7.2fs %7.2fs %7.2fs  %s\n' "$c" "$median" "$(head -1 <<<"$sorted")" \
    "$(tail -1 <<<"$sorted")" "${codes[$c]}"
done
