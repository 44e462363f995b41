#!/usr/bin/env bash
# Shared memory on one host: hvd_allreduce against Open MPI's MPI_Allreduce with its defaults
# (vader), float32 sum, every power of two from 8 B to 64 MiB, at each --np. One run is
# tools/compare_allreduce.sh --only hvd,mpishm twice, out of place and in place; each peer
# counts the better of the two at each size (the slowest rank's median). RUNS runs, one after
# another; per size: each peer's median over the runs, hvd/Open MPI of every run (min-max),
# and in how many runs hvd was at or below Open MPI. The CPU and its caches head the table.
#
# Usage: tools/compare_shm.sh [--build DIR] [--np "2 4"] [--runs 5] [-n ITERS] [--out DIR]
# Needs what tools/compare_allreduce.sh needs for hvd and mpishm. A benchmark, not a test.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${here%/tools}/build nps="2 4" runs=5 iters=3000 out=""
while (($#)); do
  case $1 in
    --build) build=${2:?}; shift ;;
    --np) nps=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    -n) iters=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    -h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "compare_shm: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "compare_shm: --runs takes a positive count" >&2; exit 2; }
[[ -n $out ]] || out=$(mktemp -d /tmp/compare_shm.XXXXXX)
mkdir -p "$out"
sizes=""
for ((b = 8; b <= 64 << 20; b *= 2)); do sizes+="${sizes:+ }$b"; done

echo "date: $(date -u +%FT%TZ)  cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "$(nproc) cores; caches: $(lscpu | awk -F': *' '/^L[123][di]? cache/ {printf "%s %s; ", $1, $2}')"
for ((r = 1; r <= runs; r++)); do
  for mode in out in; do
    flag=()
    [[ $mode == in ]] && flag=(--inplace)
    "$here/compare_allreduce.sh" --build "$build" --only hvd,mpishm --np "$nps" \
      --sizes "$sizes" -n "$iters" "${flag[@]}" >"$out/run$r.$mode" 2>&1 ||
      { echo "compare_shm: run $r ($mode of place) failed: $out/run$r.$mode" >&2; exit 1; }
  done
done

# rows "np size hvd_us mpishm_us ratio" of every file -> the table
for ((r = 1; r <= runs; r++)); do
  awk -v r="$r" '$1 ~ /^[0-9]+$/ && NF == 5 {print r, FILENAME ~ /\.in$/ ? "in" : "out", $1, $2, $3, $4}' \
    "$out/run$r.out" "$out/run$r.in"
done | awk -v runs="$runs" '
  function med(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    k = $3 " " $4; if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
    rk = $1 SUBSEP k
    if (!(rk in h) || $5 + 0 < h[rk]) h[rk] = $5 + 0
    if (!(rk in m) || $6 + 0 < m[rk]) m[rk] = $6 + 0
  }
  END {
    printf "%-4s %7s %12s %12s %16s %10s\n", "np", "size", "hvd_us", "openmpi_us", "hvd/openmpi", "hvd ahead"
    for (i = 1; i <= nk; i++) {
      k = order[i]; hs = ""; ms = ""; lo = 1e9; hi = 0; ahead = 0
      for (r = 1; r <= runs; r++) {
        rk = r SUBSEP k; hs = hs " " h[rk]; ms = ms " " m[rk]; q = h[rk] / m[rk]
        if (q < lo) lo = q; if (q > hi) hi = q; if (q <= 1) ahead++
      }
      split(k, f, " ")
      printf "%-4s %7s %12.2f %12.2f %7.2f-%-8.2f %6d of %d\n", f[1], f[2], med(hs), med(ms), lo, hi, ahead, runs
    }
  }'
echo "(each run: the better of out of place and in place per peer; raw outputs: $out)"
