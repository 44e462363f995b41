#!/usr/bin/env bash
# Big jobs on one host: `horovodrun -np N -H localhost:N examples/hello` RUNS times; for each run
# the exit status, the wall time and the number of lines that are not a rank's hello (an error,
# a warning, a dropped connection: a clean run has none), then the runs that were clean and the
# median, smallest and largest time. A benchmark, not a test (1,024 ranks take most of a minute
# on two cores).
# Usage: tools/bench_many_ranks.sh [--build DIR] [--np "256 1024"] [--runs N] [--keep DIR]
# --keep keeps every run's output there (else only a failed run's, under $TMPDIR).
# Exit status: 0 when every run was clean, 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${here%/tools}/build nps=1024 runs=10 keep=""
while (($#)); do
  case $1 in
    --build) build=${2:?}; shift ;;
    --np) nps=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    --keep) keep=${2:?}; shift ;;
    -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench_many_ranks: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench_many_ranks: bad --runs: $runs" >&2; exit 2; }
[[ -x $build/horovodrun && -x $build/examples/hello ]] ||
  { echo "bench_many_ranks: build $build first (horovodrun, examples/hello)" >&2; exit 2; }
out=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/bench_many_ranks.XXXXXX")}
mkdir -p "$out"

echo "cores: $(nproc), load average: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
printf '%-6s %-4s %-4s %9s %12s\n' np run rc seconds "other lines"
all_clean=1
for np in $nps; do
  [[ $np =~ ^[1-9][0-9]*$ ]] || { echo "bench_many_ranks: bad --np entry: $np" >&2; exit 2; }
  times=() clean=0
  for ((i = 1; i <= runs; i++)); do
    log="$out/np$np.run$i.log"
    s=$(date +%s%N)
    rc=0
    "$build/horovodrun" -np "$np" -H "localhost:$np" "$build/examples/hello" >"$log" 2>&1 || rc=$?
    e=$(date +%s%N)
    t=$(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
    hellos=$(grep -c '^\[[0-9]*\]<stdout>:hello from rank' "$log" || true)
    other=$(grep -vc '^\[[0-9]*\]<stdout>:hello from rank' "$log" || true)
    printf '%-6s %-4s %-4s %9s %12s\n' "$np" "$i" "$rc" "$t" "$other"
    if ((rc == 0 && other == 0 && hellos == np)); then
      clean=$((clean + 1))
      [[ -n $keep ]] || rm -f "$log"
    else
      all_clean=0
      echo "  run $i: $hellos of $np hellos; output kept in $log"
    fi
    times+=("$t")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v np="$np" -v c="$clean" -v n="$runs" \
    '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2;
      printf "np %s: %d of %d runs clean; seconds median %.1f, min %.1f, max %.1f\n", np, c, n, m, a[1], a[NR]}'
done
[[ -n $keep ]] || rmdir "$out" 2>/dev/null || true
((all_clean)) || exit 1
