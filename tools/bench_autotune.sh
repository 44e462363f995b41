#!/usr/bin/env bash
# Autotune against hand-picked settings (issue 29, item 7), on this host:
#
#   tools/bench_autotune.sh [BUILD_DIR] [REPEATS] [NP]
#
# or across hosts simulated in network namespaces (tests/netns/netbed.sh; needs root), HxS
# being H hosts of S ranks each, every host sending at most RATE (tc's units, e.g. 10gbit;
# none: unshaped) on its link:
#
#   tools/bench_autotune.sh --hosts HxS [--rate RATE] [BUILD_DIR] [REPEATS]
#
# tools/pytorch_synthetic_benchmark.py (the MLP, 11.6 MB of gradients, batch 8 per rank) at
# NP ranks (default 2), each run 300 warmup steps and then 10 iterations of 20 measured
# steps, total img/s: with the defaults; with --autotune from the defaults (a small budget,
# 1 warmup sample, 5 steps a sample, 10 configurations: it ends inside the warmup, so the
# measured steps run the configuration it kept); and with each hand-picked fusion threshold
# and cycle time of a grid, including deliberately poor ones (1 MiB, 20 ms). Every setting
# once per repeat, in the same order, so that the machine's drift hits all of them alike;
# the table gives every repeat's figure and the median (SETTINGS="default autotune": only
# those). A benchmark, not a test.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
shape="" rate=""
while [[ ${1:-} == --* ]]; do
  case $1 in
  --hosts) shape=${2:?}; shift 2 ;;
  --rate) rate=${2:?}; shift 2 ;;
  *) echo "bench_autotune: unknown option $1" >&2; exit 2 ;;
  esac
done
BUILD=$(cd "${1:-build}" && pwd)
REPEATS=${2:-2}
NP=${3:-2}
RUN="$BUILD/horovodrun"
[[ -x $RUN ]] || { echo "no $RUN: build first" >&2; exit 1; }
HOSTS=() # horovodrun's -H, on the simulated hosts
if [[ -n $shape && -z ${HVD_BENCH_HOSTS:-} ]]; then
  [[ $shape =~ ^([1-9][0-9]*)x([1-9][0-9]*)$ ]] || { echo "bench_autotune: bad --hosts $shape (HxS)" >&2; exit 2; }
  h=${BASH_REMATCH[1]} spec=""
  for ((i = 1; i <= h; i++)); do spec+="${spec:+,}h$i:${BASH_REMATCH[2]}"; done
  netbed=${HERE%/tools}/tests/netns/netbed.sh
  export HVD_NETBED_PREFIX=hvdtune$$
  export HVD_NETBED_DIR=/tmp/hvd-netbed-$HVD_NETBED_PREFIX
  trap 'timeout 60 bash "$netbed" down >/dev/null || echo "bench_autotune: netbed down failed" >&2' EXIT
  bash "$netbed" up "$h" --hostnames ${rate:+--rate "$rate"} >/dev/null
  echo "hosts $shape ($spec), link: $(bash "$netbed" exec h1 tc qdisc show dev eth0 | head -1)" >&2
  home=$HVD_NETBED_DIR/home
  mkdir -p "$home"
  # the same script on h1, horovodrun reaching the others through the bed's ssh wrapper
  bash "$netbed" exec h1 env PATH="$HVD_NETBED_DIR/bin:$PATH" HOME="$home" \
    HVD_BENCH_HOSTS="$spec" SETTINGS="${SETTINGS:-}" bash "$HERE/bench_autotune.sh" "$BUILD" "$REPEATS" \
    $((h * BASH_REMATCH[2])) </dev/null
  exit
fi
if [[ -n ${HVD_BENCH_HOSTS:-} ]]; then HOSTS=(-H "$HVD_BENCH_HOSTS"); fi
export PYTHONPATH=$BUILD/python
BENCH=("$HERE/pytorch_synthetic_benchmark.py" --num-warmup-batches 300 --num-iters 10
       --num-batches-per-iter 20)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

settings=(default autotune)
for f in 1 8 64; do
  for c in 1 5 20; do settings+=("f${f}c${c}"); done
done
# SETTINGS="default autotune" runs only those
if [[ -n ${SETTINGS:-} ]]; then read -ra settings <<<"$SETTINGS"; fi

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
  # (bounded: a run that hangs shows as "fail" in the table)
  timeout -k 10 900 env "${env[@]}" "$RUN" -np "$NP" "${HOSTS[@]}" "${args[@]}" /usr/bin/python3 "${BENCH[@]}" 2>/dev/null |
    sed -n 's/.*Total img\/sec on [0-9]* rank(s): \([0-9.]*\).*/\1/p'
}

declare -A got
for ((k = 1; k <= REPEATS; k++)); do
  for s in "${settings[@]}"; do
    v=$(run "$s") || v="" # (a failed or hung run: "fail" below)
    got[$s]+="${v:-fail} "
    echo "repeat $k: $s $v" >&2
  done
  [[ -f $TMP/tune.csv ]] && { echo "autotune kept (last line of its log, repeat $k):" >&2; tail -1 "$TMP/tune.csv" >&2; }
done
echo "| setting (np $NP${HVD_BENCH_HOSTS:+, $HVD_BENCH_HOSTS}) | total img/s, each repeat | median |"
echo "|---|---|---|"
for s in "${settings[@]}"; do
  med=$(tr ' ' '\n' <<<"${got[$s]}" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  echo "| $s | ${got[$s]}| $med |"
done
