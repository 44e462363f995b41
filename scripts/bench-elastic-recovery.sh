#!/usr/bin/env bash
# Elastic recovery benchmark: how long from the moment a worker is killed (SIGKILL) or frozen
# (SIGSTOP) until the first successful collective of the new world, with S MB of state synced
# from rank 0 to the survivors on the way.
#
#   scripts/bench-elastic-recovery.sh [BUILD_DIR] [TRIALS] [STATE_MB] [MODE] [WORKER]
#     MODE kill (default): SIGKILL a worker that is not rank 0
#     MODE stop: SIGSTOP one instead (detected by missing heartbeats; HOROVOD_GLOO_TIMEOUT_SECONDS
#                is the timeout, default 5 here)
#     WORKER c (default): tests/elastic_worker, the state registered with hvd_elastic_state_add
#     WORKER pytorch: tests/python/jobs/elastic_worker.py, hvd.elastic.run with a TorchState
#                whose model holds the STATE_MB (plus a momentum SGD optimizer)
#
# One job of three hosts on loopback (127.0.0.1-3, one worker each) runs the worker with
# --bench, which prints "recovered <ms> <CLOCK_REALTIME ms>" on rank 0 after the first
# step of every new world. Each trial picks a victim on a host other than rank 0's,
# notes the wall clock, signals it, and reads the first "recovered" line that follows; the
# killed host is blacklisted for 2 s (--blacklist-cooldown-range 1 2) and then rejoins, and the
# next trial waits for the world of three again. Prints every trial, then median and max.
set -euo pipefail
BUILD=${1:-build}
TRIALS=${2:-20}
STATE_MB=${3:-100}
MODE=${4:-kill}
KIND=${5:-c}
HVDRUN=$BUILD/horovodrun
case $KIND in
c) WORKER=("$BUILD/tests/elastic_worker") ;;
pytorch)
  WORKER=(/usr/bin/python3 "$(dirname "$0")/../tests/python/jobs/elastic_worker.py")
  export PYTHONPATH=$BUILD/python
  ;;
*)
  echo "WORKER is c or pytorch, not $KIND" >&2
  exit 2
  ;;
esac
[[ -x $HVDRUN && -e ${WORKER[-1]} ]] || {
  echo "build $BUILD first (horovodrun and tests/elastic_worker)" >&2
  exit 2
}
TMP=$(mktemp -d /tmp/hvd-bench-elastic.XXXXXX)
printf '127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n' >"$TMP/hosts"
printf '#!/bin/sh\ncat "%s/hosts"\n' "$TMP" >"$TMP/discover.sh"
chmod +x "$TMP/discover.sh"
export HOROVOD_GLOO_TIMEOUT_SECONDS=${HOROVOD_GLOO_TIMEOUT_SECONDS:-$([[ $MODE == stop ]] && echo 5 || echo 30)}

"$HVDRUN" --host-discovery-script "$TMP/discover.sh" -np 3 --min-np 2 \
  --blacklist-cooldown-range 1 2 "${WORKER[@]}" --steps 100000000 --commit-every 5 --sleep-ms 20 \
  --state-mb "$STATE_MB" --bench --print-pid >"$TMP/out" 2>"$TMP/err" &
JOB=$!
cleanup() {
  kill -TERM "$JOB" 2>/dev/null || true
  wait "$JOB" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }
lines() { grep -ac "$1" "$TMP/out" || true; }
# wait_for COUNT_PATTERN MIN SECONDS
wait_for() {
  local deadline=$((SECONDS + $3))
  while (($(lines "$1") < $2)); do
    ((SECONDS < deadline)) || {
      echo "timed out waiting for '$1' (stderr follows)" >&2
      tail -20 "$TMP/err" >&2
      exit 1
    }
    sleep 0.02
  done
}

results=()
for ((t = 1; t <= TRIALS; t++)); do
  # a world of three that has committed since it formed
  base=$(lines 'size 3 ')
  wait_for 'size 3 ' $((base + 2)) 120
  rank0_host=$(grep -a '<stdout>:pid 0 ' "$TMP/out" | tail -1 | awk '{print $3}')
  victim_host=$(printf '127.0.0.%d\n' 1 2 3 | grep -vx "$rank0_host" | shuf -n 1)
  pid=$(grep -a "<stdout>:pid [0-9]* $victim_host " "$TMP/out" | tail -1 | awk '{print $4}')
  before=$(lines '<stdout>:recovered ')
  t0=$(now_ms)
  if [[ $MODE == stop ]]; then kill -STOP "$pid"; else kill -KILL "$pid"; fi
  wait_for '<stdout>:recovered ' $((before + 1)) 120
  line=$(grep -a '<stdout>:recovered ' "$TMP/out" | sed -n "$((before + 1))p")
  t1=$(awk '{print $3}' <<<"$line")
  ms=$((t1 - t0))
  results+=("$ms")
  printf 'trial %2d: %s %s (pid %s): %d ms to the first collective of the new world\n' \
    "$t" "$MODE" "$victim_host" "$pid" "$ms"
done
sorted=$(printf '%s\n' "${results[@]}" | sort -n)
n=${#results[@]}
median=$(sed -n "$(((n + 1) / 2))p" <<<"$sorted")
max=$(tail -1 <<<"$sorted")
min=$(head -1 <<<"$sorted")
echo "$KIND worker, $MODE, $STATE_MB MB state, $n trials: median $median ms, min $min ms, max $max ms" \
  "(HOROVOD_GLOO_TIMEOUT_SECONDS=$HOROVOD_GLOO_TIMEOUT_SECONDS)"
