#!/usr/bin/env bash
# Elastic recovery across many hosts, simulated on this machine: network namespaces with sshd
# each (tests/netns/netbed.sh), horovodrun on h1 running tests/elastic_worker (--bench) with
# SLOTS ranks on every host. Each trial
#   1. takes a host other than rank 0's out of the discovery script's list and kills every
#      process of the job on it (SIGKILL; its sshd stays, as a machine that rebooted), then
#      measures the time until the survivors' first collective of the new world (the worker's
#      "recovered" line: they resumed from the last commit, the state synced from rank 0);
#   2. waits out the blacklist cool-down (--blacklist-cooldown-range 1 2), lists the host
#      again and measures the time until a commit of the full world (the host rejoined: the
#      driver's next discovery, the ssh launch of its workers, their init, a reset, the sync).
# Prints every trial, then median (min-max) of each.
#
# Usage: tools/bench_elastic_hosts.sh [--build DIR] [--hosts 32] [--slots 2] [--trials 5]
#          [--state-mb 1]
# Needs root, iproute2 and openssh (scripts/install-deps.sh). A benchmark, not a test.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${here%/tools}
build=$root/build hosts=32 slots=2 trials=5 state_mb=1
while (($#)); do
  case $1 in
    --build) build=$(cd "${2:?}" && pwd); shift ;;
    --hosts) hosts=${2:?}; shift ;;
    --slots) slots=${2:?}; shift ;;
    --trials) trials=${2:?}; shift ;;
    --state-mb) state_mb=${2:?}; shift ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench_elastic_hosts: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $hosts =~ ^[1-9][0-9]*$ && $slots =~ ^[1-9][0-9]*$ && $trials =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench_elastic_hosts: --hosts, --slots and --trials take positive counts" >&2; exit 2; }
((hosts >= 3)) || { echo "bench_elastic_hosts: needs 3 hosts at least" >&2; exit 2; }
(($(id -u) == 0)) || { echo "bench_elastic_hosts: needs root (ip netns)" >&2; exit 2; }
[[ -x $build/horovodrun && -x $build/tests/elastic_worker ]] ||
  { echo "bench_elastic_hosts: build $build first (horovodrun, tests/elastic_worker)" >&2; exit 2; }

export HVD_NETBED_PREFIX=hvdbe$$
export HVD_NETBED_DIR=/tmp/hvd-netbed-$HVD_NETBED_PREFIX
netbed=$root/tests/netns/netbed.sh
tmp=$HVD_NETBED_DIR/job
job=""
cleanup() {
  local rc=$?
  if [[ -n $job ]]; then
    kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
  fi
  timeout 60 bash "$netbed" down >/dev/null || echo "bench_elastic_hosts: netbed down failed" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
bash "$netbed" up "$hosts" --hostnames >/dev/null
mkdir -p "$tmp/home"

np=$((hosts * slots))
list_hosts() { # the discovery script's list, without host $1 (none: 0)
  local i
  for ((i = 1; i <= hosts; i++)); do ((i == $1)) || echo "h$i:$slots"; done >"$tmp/hosts.new"
  mv "$tmp/hosts.new" "$tmp/hosts"
}
list_hosts 0
printf '#!/bin/sh\ncat "%s/hosts"\n' "$tmp" >"$tmp/discover.sh"
chmod +x "$tmp/discover.sh"

(cd "$tmp" && exec ip netns exec "${HVD_NETBED_PREFIX}h1" env PATH="$HVD_NETBED_DIR/bin:$PATH" \
  HOME="$tmp/home" "$build/horovodrun" --host-discovery-script "$tmp/discover.sh" -np "$np" \
  --min-np "$slots" --blacklist-cooldown-range 1 2 --network-interface eth0 \
  "$build/tests/elastic_worker" --steps 100000000 --commit-every 5 --sleep-ms 20 \
  --state-mb "$state_mb" --bench --print-pid </dev/null >"$tmp/out" 2>"$tmp/err") &
job=$!

now_ms() { date +%s%3N; }
lines() { grep -ac -- "$1" "$tmp/out" || true; }
wait_for() { # PATTERN MIN SECONDS: until PATTERN has MIN lines in the output
  local deadline=$((SECONDS + $3))
  while (($(lines "$1") < $2)); do
    if ((SECONDS >= deadline)) || ! kill -0 "$job" 2>/dev/null; then
      echo "bench_elastic_hosts: no '$1' line $2 within $3 s; the job's stderr ends:" >&2
      tail -20 "$tmp/err" >&2
      exit 1
    fi
    sleep 0.02
  done
}
kill_host() { # the job's processes in host h$1's namespace (not its sshd listener)
  local p
  for p in $(ip netns pids "${HVD_NETBED_PREFIX}h$1" 2>/dev/null); do
    grep -q listener "/proc/$p/cmdline" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
  done
}

start=$(now_ms)
wait_for "size $np " 1 600
printf 'job of %d ranks on %d hosts (h1..h%d:%d) committed at full size after %d ms\n' \
  "$np" "$hosts" "$hosts" "$slots" "$(($(now_ms) - start))"
resumed=() rejoined=()
for ((t = 1; t <= trials; t++)); do
  base=$(lines "size $np ")
  wait_for "size $np " $((base + 2)) 300 # a full world that has committed since it formed
  rank0=$(grep -a '<stdout>:pid 0 ' "$tmp/out" | tail -1 | awk '{print $3}')
  victim=$(seq 2 "$hosts" | grep -vx "${rank0#h}" | shuf -n 1)
  before=$(lines '<stdout>:recovered ')
  full=$(lines "size $np ")
  list_hosts "$victim"
  t0=$(now_ms)
  kill_host "$victim"
  wait_for '<stdout>:recovered ' $((before + 1)) 300
  t1=$(grep -a '<stdout>:recovered ' "$tmp/out" | sed -n "$((before + 1))p" | awk '{print $3}')
  resumed+=($((t1 - t0)))
  sleep 2.5 # the cool-down: a host blacklisted at the kill may come back after 2 s
  list_hosts 0
  t2=$(now_ms)
  wait_for "size $np " $((full + 1)) 300
  rejoined+=($(($(now_ms) - t2)))
  printf 'trial %d: h%d killed: %d ms to the survivors'"'"' first collective; listed again: %d ms to a commit of all %d ranks\n' \
    "$t" "$victim" "${resumed[-1]}" "${rejoined[-1]}" "$np"
done
stats() {
  printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2;
    printf "median %d ms (%d-%d)", m, a[1], a[NR]}'
}
echo "$hosts hosts x $slots slots, $state_mb MB state, $trials trials:" \
  "host killed to survivors resumed $(stats "${resumed[@]}");" \
  "host listed again to full world committing $(stats "${rejoined[@]}")"
