#!/usr/bin/env bash
# Adasum against the sum on the same sizes, side by side (a benchmark, not a test):
# hvd_allreduce_perf with -o adasum and -o sum (float32, every element checked), through
# tools/compare_allreduce.sh on one host (shared memory) and through tools/compare_hosts.sh on
# hosts simulated in network namespaces (TCP between them; needs root). Prints the tables,
# then Adasum's time over the sum's per size.
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
    -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "compare_adasum: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
common=(--build "$build" --only hvd,hvdadasum --sizes "$sizes" -n "$iters")
"$here/compare_allreduce.sh" "${common[@]}" --np "$nps" | tee -a "$out"
if ((hosts)); then
  "$here/compare_hosts.sh" "${common[@]}" --shapes "$shapes" | tee -a "$out"
fi
echo
echo "Adasum time / sum time (float32, median per call, slowest rank)"
# rows of the tables: shape, size, hvd_us, hvdadasum_us (numbers)
awk 'NF >= 4 && $3 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ && $3 > 0 {
       printf "  %-8s %8s  sum %10.1f us  adasum %10.1f us  ratio %.2f\n", $1, $2, $3, $4, $4 / $3 }' "$out"
