#!/usr/bin/env bash
# Adasum against the sum on the same sizes, side by side (a benchmark, not a test), float32,
# every element checked. On one host (shared memory), one hvd_allreduce_perf run per rank
# count and size calls the two ops in turn on every iteration (-o sum,adasum), so that both
# see the same moments of a machine whose speed drifts; across hosts simulated in network
# namespaces (TCP between them; needs root), tools/compare_hosts.sh runs them one after the
# other. Prints the tables, then Adasum's time over the sum's per size.
#
#   tools/compare_adasum.sh [--build DIR] [--np "2 4"] [--shapes "2x2"] [-n ITERS]
#                           [--sizes "8 1K 64K 1M 4M 16M 64M"] [--no-hosts]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${here%/tools}/build nps="2 4" shapes="2x2" iters=50 sizes="8 1K 64K 1M 4M 16M 64M" hosts=1
while (($#)); do
  case $1 in
    --build) build=${2:?}; shift ;;
    --np) nps=${2:?}; shift ;;
    --shapes) shapes=${2:?}; shift ;;
    -n) iters=${2:?}; shift ;;
    --sizes) sizes=${2:?}; shift ;;
    --no-hosts) hosts=0 ;;
    -h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "compare_adasum: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -x $build/horovodrun && -x $build/tools/hvd_allreduce_perf ]] ||
  { echo "compare_adasum: build hvd in $build first" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
echo "date: $(date -u +%FT%TZ)  host: $(uname -n)  cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "one host, shared memory: median us per call of the slowest rank, the two ops in turn"
printf '%-8s %10s %12s %12s %7s %7s\n' np size sum_us adasum_us ratio wrong
for np in $nps; do
  for s in $sizes; do
    raw=$("$build/horovodrun" -np "$np" "$build/tools/hvd_allreduce_perf" -b "$s" -e "$s" \
      -n "$iters" -w 5 -d float32 -o sum,adasum -c 1 2>&1) || status=1
    # rank 0's rows: size count type op root time algbw busbw wrong
    echo "$raw" | awk -v np="$np" '
      sub(/^\[0\]<stdout>:/, "") && $1 ~ /^[0-9]+$/ { t[$4] = $6; w += ($9 != "0"); size = $1 }
      END { if (t["sum"] > 0 && t["adasum"] > 0)
              printf "%-8s %10s %12.1f %12.1f %7.2f %7s\n", np, size, t["sum"], t["adasum"],
                     t["adasum"] / t["sum"], w ? "WRONG" : "0"
            else printf "%-8s %10s %12s %12s %7s %7s\n", np, "?", "failed", "failed", "-", "-" }' |
      tee -a "$out"
  done
done
if ((hosts)); then
  hout=$(mktemp)
  trap 'rm -f "$out" "$hout"' EXIT
  "$here/compare_hosts.sh" --build "$build" --only hvd,hvdadasum --sizes "$sizes" -n "$iters" \
    --shapes "$shapes" | tee "$hout" || status=1
  # rows of its tables: shape, size, hvd_us, hvdadasum_us (numbers)
  awk 'NF >= 4 && $3 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ && $3 > 0 {
         printf "%-8s %10s %12.1f %12.1f %7.2f\n", $1, $2, $3, $4, $4 / $3 }' "$hout" >>"$out"
fi
echo
echo "Adasum time / sum time (float32, median per call, slowest rank)"
awk '$5 ~ /^[0-9.]+$/ { printf "  %-8s %10s  sum %10.1f us  adasum %10.1f us  ratio %s\n", $1, $2, $3, $4, $5 }' "$out"
exit "$status"
