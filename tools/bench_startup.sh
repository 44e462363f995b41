#!/usr/bin/env bash
# Start-up cost of a job: median wall time of `horovodrun -np N /bin/true` (launch, supervise,
# tear down), of the same job with every rank doing hvd_init through the rendezvous, and of
# `mpirun -np N true` when Open MPI is installed, side by side.
# Usage: tools/bench_startup.sh [BUILD_DIR] [NP] [RUNS]   (a benchmark, not a test)
set -euo pipefail
build=${1:-build} np=${2:-4} runs=${3:-30}

median_ms() { # command... -> median wall time in ms over $runs runs (after 3 warm-ups)
  local t=() s e
  for _ in 1 2 3; do "$@" >/dev/null 2>&1; done
  for ((i = 0; i < runs; i++)); do
    s=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
    e=$(date +%s%N)
    t+=($(((e - s) / 1000)))
  done
  printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m/1000}'
}

printf '%-52s %s\n' "command (np=$np, $runs runs)" "median ms"
printf '%-52s %s\n' "horovodrun -np $np /bin/true" "$(median_ms "$build/horovodrun" -np "$np" /bin/true)"
printf '%-52s %s\n' "horovodrun -np $np examples/hello (hvd_init)" \
  "$(median_ms "$build/horovodrun" -np "$np" "$build/examples/hello")"
if command -v mpirun >/dev/null; then
  printf '%-52s %s\n' "mpirun -np $np true" \
    "$(median_ms mpirun --allow-run-as-root --oversubscribe -np "$np" true)"
fi
