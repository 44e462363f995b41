#!/usr/bin/env bash
# Autotune against hand-picked settings (issue 29, item 7), on this host:
#
#   tools/bench_autotune.sh [BUILD_DIR] [REPEATS] [NP]
#
# tools/pytorch_synthetic_benchmark.py (the MLP, 11.6 MB of gradients, batch 8 per rank) at
# NP ranks (default 2), each run 300 warmup steps and then 10 iterations of 20 measured
# steps, total img/s: with the defaults; with --autotune from the defaults (a small budget,
# 1 warmup sample, 5 steps a sample, 10 configurations: it ends inside the warmup, so the
# measured steps run the configuration it kept); and with each hand-picked fusion threshold
# and cycle time of a grid, including deliberately poor ones (1 MiB, 20 ms). Every setting
# once per repeat, in the same order, so that the machine's drift hits all of them alike;
# the table gives every repeat's figure and the median. A benchmark, not a test.
set -euo pipefail
BUILD=${1:-build}
REPEATS=${2:-2}
NP=${3:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
RUN="$BUILD/horovodrun"
[[ -x $RUN ]] || { echo "no $RUN: build first" >&2; exit 1; }
export PYTHONPATH=$BUILD/python
BENCH=("$HERE/pytorch_synthetic_benchmark.py" --num-warmup-batches 300 --num-iters 10
       --num-batches-per-iter 20)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

settings=(default autotune)
for f in 1 8 64; do
  for c in 1 5 20; do settings+=("f${f}c${c}"); done
done

run() { # SETTING -> total img/s
  local s=$1 args=() env=()
  case $s in
  default) ;;
  autotune) args=(--autotune --autotune-log-file "$TMP/tune.csv" --autotune-warmup-samples 1
                  --autotune-steps-per-sample 5 --autotune-bayes-opt-max-samples 10) ;;
  f*) local f=${s#f} c=${s#*c}
      f=${f%c*}
      env=(HOROVOD_FUSION_THRESHOLD=$((f * 1024 * 1024)) HOROVOD_CYCLE_TIME=$c) ;;
  esac
  env "${env[@]}" "$RUN" -np "$NP" "${args[@]}" /usr/bin/python3 "${BENCH[@]}" 2>/dev/null |
    sed -n 's/.*Total img\/sec on [0-9]* rank(s): \([0-9.]*\).*/\1/p'
}

declare -A got
for ((k = 1; k <= REPEATS; k++)); do
  for s in "${settings[@]}"; do
    v=$(run "$s")
    got[$s]+="${v:-fail} "
    echo "repeat $k: $s $v" >&2
  done
  [[ -f $TMP/tune.csv ]] && { echo "autotune kept (last line of its log, repeat $k):" >&2; tail -1 "$TMP/tune.csv" >&2; }
done
echo "| setting (np $NP) | total img/s, each repeat | median |"
echo "|---|---|---|"
for s in "${settings[@]}"; do
  med=$(tr ' ' '\n' <<<"${got[$s]}" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  echo "| $s | ${got[$s]}| $med |"
done
