#!/usr/bin/env bash
# Adasum against the sum on the same sizes, side by side (a benchmark, not a test), float32,
# every element checked. One hvd_allreduce_perf run per rank count (or shape) and size calls
# the two ops in turn on every iteration (-o sum,adasum), so that both see the same moments of
# a machine whose speed drifts: on one host (shared memory), and across hosts simulated in
# network namespaces by tools/compare_hosts.sh (TCP between them; needs root). Prints a table
# with Adasum's time over the sum's per size.
#
#   tools/compare_adasum.sh [--build DIR] [--np "2 4"] [--shapes "2x2"] [-n ITERS]
#                           [--sizes "8 1K 64K 1M 4M 16M 64M"] [--no-hosts]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${here%/tools}/build nps="2 4" shapes="2x2" iters=50 sizes="8 1K 64K 1M 4M 16M 64M" hosts=1
on_hosts=0 # (internal: the rows of one shape, run on a simulated host by compare_hosts.sh)
while (($#)); do
  case $1 in
    --build) build=${2:?}; shift ;;
    --np) nps=${2:?}; shift ;;
    --shapes) shapes=${2:?}; shift ;;
    -n) iters=${2:?}; shift ;;
    --sizes) sizes=${2:?}; shift ;;
    --no-hosts) hosts=0 ;;
    --on-hosts) on_hosts=1 ;;
    -h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "compare_adasum: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -x $build/horovodrun && -x $build/tools/hvd_allreduce_perf ]] ||
  { echo "compare_adasum: build hvd in $build first" >&2; exit 2; }
# rows LABEL HOROVODRUN_ARGS...: one row per size: label, size, sum us, adasum us, ratio, wrong
rows() {
  local label=$1 s raw
  shift
  for s in $sizes; do
    # (bounded: a run that hangs shows as "failed" in the table)
    raw=$(timeout -k 10 600 "$build/horovodrun" "$@" "$build/tools/hvd_allreduce_perf" -b "$s" -e "$s" \
      -n "$iters" -w 5 -d float32 -o sum,adasum -c 1 2>&1) || status=1
    # rank 0's rows: size count type op root time algbw busbw wrong
    echo "$raw" | awk -v label="$label" '
      sub(/^\[0\]<stdout>:/, "") && $1 ~ /^[0-9]+$/ { t[$4] = $6; w += ($9 != "0"); size = $1 }
      END { if (t["sum"] > 0 && t["adasum"] > 0)
              printf "%-8s %10s %12.1f %12.1f %7.2f %7s\n", label, size, t["sum"], t["adasum"],
                     t["adasum"] / t["sum"], w ? "WRONG" : "0"
            else printf "%-8s %10s %12s %12s %7s %7s\n", label, "?", "failed", "failed", "-", "-" }'
  done
}
status=0
if ((on_hosts)); then
  np=0
  for h in ${HVD_COMPARE_HOSTS//,/ }; do np=$((np + ${h##*:})); done
  rows "$HVD_COMPARE_SHAPE" -np "$np" -H "$HVD_COMPARE_HOSTS"
  exit "$status"
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "date: $(date -u +%FT%TZ)  host: $(uname -n)  cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "median us per call of the slowest rank, the two ops in turn; np N: one host (shared"
echo "memory), HxS: H simulated hosts of S ranks (TCP between them)"
printf '%-8s %10s %12s %12s %7s %7s\n' ranks size sum_us adasum_us ratio wrong
for np in $nps; do
  rows "$np" -np "$np" | tee -a "$out"
done
if ((hosts)); then
  "$here/compare_hosts.sh" --shapes "$shapes" --exec bash "$here/compare_adasum.sh" --on-hosts --build "$build" \
    --sizes "$sizes" -n "$iters" | tee -a "$out" || status=1
fi
# (rows ran in pipelines: their failures show in the table)
if grep -qE 'failed|WRONG' "$out"; then status=1; fi
echo
echo "Adasum time / sum time (float32, median per call, slowest rank)"
awk '$5 ~ /^[0-9.]+$/ && $3 ~ /^[0-9.]+$/ { printf "  %-8s %10s  sum %10.1f us  adasum %10.1f us  ratio %s\n", $1, $2, $3, $4, $5 }' "$out"
exit "$status"
