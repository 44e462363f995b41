#!/usr/bin/env bash
# Big jobs on one host: `horovodrun -np N -H localhost:N examples/hello` RUNS times; for each run
# the exit status, the wall time and the number of lines that are not a rank's hello (an error,
# a warning, a dropped connection: a clean run has none), then the runs that were clean and the
# median, smallest and largest time. A benchmark, not a test (1,024 ranks take most of a minute
# on two cores). --elastic runs an elastic job instead (--min-np N: the elastic driver, its
# heartbeats and the per-round check-in through the store): tests/elastic_worker --steps 20,
# whose rank 0 prints its commits and "done step 20 acc 190 resets 0" (the exact result, no
# reset); a clean run prints nothing else. --phases runs tools/rank_phases instead of hello and
# says, for each run, by when the last rank had started, had returned from hvd_init, from its
# first allreduce and from hvd_shutdown (seconds from the launch; then the launcher's end).
# Usage: tools/bench_many_ranks.sh [--build DIR] [--np "256 1024"] [--runs N] [--keep DIR]
#                                  [--elastic | --phases]
# --keep keeps every run's output there (else only a failed run's, under $TMPDIR).
# Exit status: 0 when every run was clean, 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${here%/tools}/build nps=1024 runs=10 keep="" elastic=0 phases=0
while (($#)); do
  case $1 in
    --build) build=${2:?}; shift ;;
    --np) nps=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    --keep) keep=${2:?}; shift ;;
    --elastic) elastic=1; shift; continue ;;
    --phases) phases=1; shift; continue ;;
    -h | --help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench_many_ranks: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench_many_ranks: bad --runs: $runs" >&2; exit 2; }
prog=$build/examples/hello
((elastic)) && prog=$build/tests/elastic_worker
((phases)) && prog=$build/tools/rank_phases
[[ -x $build/horovodrun && -x $prog ]] ||
  { echo "bench_many_ranks: build $build first (horovodrun, $prog)" >&2; exit 2; }
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
    if ((elastic)); then
      "$build/horovodrun" -np "$np" --min-np "$np" -H "localhost:$np" "$prog" --steps 20 \
        --commit-every 5 >"$log" 2>&1 || rc=$?
      good='^\[0\]<stdout>:(commit [0-9]+ step [0-9]+ size '$np' acc [0-9]+|done step 20 acc 190 resets 0)$'
      want=1 what="done lines"
      done_re='^\[0\]<stdout>:done step 20 acc 190 resets 0$'
    elif ((phases)); then
      HVD_BENCH_T0=$(awk -v s="$s" 'BEGIN {printf "%.3f", s / 1e9}') \
        "$build/horovodrun" -np "$np" -H "localhost:$np" "$prog" >"$log" 2>&1 || rc=$?
      good='^\[[0-9]*\]<stdout>:phases ' want=$np what="ranks' phases" done_re=$good
    else
      "$build/horovodrun" -np "$np" -H "localhost:$np" "$prog" >"$log" 2>&1 || rc=$?
      good='^\[[0-9]*\]<stdout>:hello from rank' want=$np what=hellos done_re=$good
    fi
    e=$(date +%s%N)
    t=$(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
    got=$(grep -Ec "$done_re" "$log" || true)
    other=$(grep -Evc "$good" "$log" || true)
    printf '%-6s %-4s %-4s %9s %12s\n' "$np" "$i" "$rc" "$t" "$other"
    if ((phases)); then
      grep -E "$good" "$log" | awk '{for (k = 3; k <= 6; k++) if ($k > m[k]) m[k] = $k}
        END {printf "       last rank started %.1f s, through hvd_init %.1f, first allreduce %.1f, hvd_shutdown %.1f\n", m[3], m[4], m[5], m[6]}'
    fi
    if ((rc == 0 && other == 0 && got == want)); then
      clean=$((clean + 1))
      [[ -n $keep ]] || rm -f "$log"
    else
      all_clean=0
      echo "  run $i: $got of $want $what; output kept in $log"
    fi
    times+=("$t")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v np="$np" -v c="$clean" -v n="$runs" \
    '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2;
      printf "np %s: %d of %d runs clean; seconds median %.1f, min %.1f, max %.1f\n", np, c, n, m, a[1], a[NR]}'
done
[[ -n $keep ]] || rmdir "$out" 2>/dev/null || true
((all_clean)) || exit 1
