#!/usr/bin/env bash
# hvd's PyTorch API side by side with its peers on this machine (a benchmark, not a test):
#
#   tools/compare_pytorch.sh [BUILD_DIR] [REPEATS]
#
# 1. Per-call cost of one float32 allreduce at np 2, of 1 element and of 1 MiB: hvd.allreduce
#    from Python, torch.distributed.all_reduce with gloo, and hvd_allreduce from C
#    (tools/hvd_allreduce_perf; median over the calls, slowest rank).
# 2. tools/pytorch_synthetic_benchmark.py (MLP 784-1024-1024-1024-10, batch 8 per rank) at
#    np 1, 2 and 4: hvd, torch DDP with gloo, and no communication at all (the limit perfect
#    overlap would reach), total img/s.
# Each measurement runs REPEATS times (default 3), the peers interleaved so that the machine's
# drift hits all alike; every figure is printed, then the medians.
# 3. At np 2 and 4, the same benchmark with --paired: hvd against no communication inside one
#    job, iteration by iteration (this machine drifts 20-30 % between runs), and the ceiling
#    any synchronous step has here (each step waits for the slowest rank).
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
run="$build/horovodrun"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
py=/usr/bin/python3

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

declare -A got
note() { got[$1]+="$2 "; }

echo "== per-call allreduce cost, np 2 (us, median per call)"
for ((i = 1; i <= repeats; i++)); do
  out=$("$run" -np 2 $py "$here/pytorch_allreduce_latency.py" 2>&1 | grep median)
  note py1 "$(grep ' 1 float32' <<<"$out" | sed -E 's/.*median ([0-9.]+) us.*/\1/')"
  note py1m "$(grep '262144 float32' <<<"$out" | sed -E 's/.*median ([0-9.]+) us.*/\1/')"
  out=$("$run" -np 2 $py "$here/pytorch_allreduce_latency.py" --gloo 2>&1 | grep median)
  note gl1 "$(grep ' 1 float32' <<<"$out" | sed -E 's/.*median ([0-9.]+) us.*/\1/')"
  note gl1m "$(grep '262144 float32' <<<"$out" | sed -E 's/.*median ([0-9.]+) us.*/\1/')"
  for bytes in 4 1048576; do
    t=$("$run" -np 2 "$build/tools/hvd_allreduce_perf" -b $bytes -e $bytes -n 2000 -w 200 2>&1 |
      sed 's/^\[0\]<stdout>://' | awk -v b=$bytes '$1 == b {print $6; exit}')
    note "c$bytes" "$t"
  done
done
printf '%-34s %-28s %s\n' "" "1 float32" "262144 float32 (1 MiB)"
printf '%-34s %-28s %s\n' "hvd.allreduce (Python)" "${got[py1]}" "${got[py1m]}"
printf '%-34s %-28s %s\n' "hvd_allreduce (C)" "${got[c4]}" "${got[c1048576]}"
printf '%-34s %-28s %s\n' "torch.distributed gloo" "${got[gl1]}" "${got[gl1m]}"
printf 'medians: hvd.allreduce %s / %s, C %s / %s, gloo %s / %s\n' \
  "$(tr ' ' '\n' <<<"${got[py1]}" | grep . | median)" "$(tr ' ' '\n' <<<"${got[py1m]}" | grep . | median)" \
  "$(tr ' ' '\n' <<<"${got[c4]}" | grep . | median)" "$(tr ' ' '\n' <<<"${got[c1048576]}" | grep . | median)" \
  "$(tr ' ' '\n' <<<"${got[gl1]}" | grep . | median)" "$(tr ' ' '\n' <<<"${got[gl1m]}" | grep . | median)"

echo
echo "== synthetic benchmark, MLP 784-1024-1024-1024-10, batch 8 per rank (total img/s)"
for np in 1 2 4; do
  for ((i = 1; i <= repeats; i++)); do
    for mode in hvd ddp none; do
      case $mode in hvd) flag="" ;; ddp) flag="--ddp" ;; none) flag="--no-comm" ;; esac
      t=$("$run" -np $np $py "$here/pytorch_synthetic_benchmark.py" $flag 2>&1 |
        sed -nE 's/.*Total img\/sec on [0-9]+ rank\(s\): ([0-9.]+).*/\1/p')
      note "$mode$np" "$t"
    done
  done
  m_hvd=$(tr ' ' '\n' <<<"${got[hvd$np]}" | grep . | median)
  m_ddp=$(tr ' ' '\n' <<<"${got[ddp$np]}" | grep . | median)
  m_none=$(tr ' ' '\n' <<<"${got[none$np]}" | grep . | median)
  echo "np $np: hvd ${got[hvd$np]}| DDP ${got[ddp$np]}| none ${got[none$np]}"
  awk -v h="$m_hvd" -v d="$m_ddp" -v n="$m_none" -v np=$np 'BEGIN {
    printf "np %d medians: hvd %.1f, DDP %.1f, no communication %.1f; hvd/DDP %.2f, hvd/none %.2f\n",
      np, h, d, n, h / d, h / n }'
  [[ $np == 1 ]] && one=$m_hvd
  awk -v h="$m_hvd" -v o="$one" -v np=$np 'BEGIN {
    printf "np %d scaling efficiency of hvd: %.2f\n", np, h / (np * o) }'
done

echo
echo "== paired in one job: hvd/no-communication per iteration, and the synchronous-step ceiling"
for np in 2 4; do
  for ((i = 1; i <= repeats; i++)); do
    out=$("$run" -np $np $py "$here/pytorch_synthetic_benchmark.py" --paired 2>&1)
    note "pair$np" "$(sed -nE 's/.*Paired hvd\/no-communication: median ([0-9.]+).*/\1/p' <<<"$out")"
    note "ceil$np" "$(sed -nE 's/.*ceiling.*: ([0-9.]+)$/\1/p' <<<"$out")"
  done
  echo "np $np: hvd/none paired ${got[pair$np]}(median $(tr ' ' '\n' <<<"${got[pair$np]}" | grep . | median)); ceiling ${got[ceil$np]}(median $(tr ' ' '\n' <<<"${got[ceil$np]}" | grep . | median))"
done
