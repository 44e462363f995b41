#!/usr/bin/env bash
# hvd's PyTorch API side by side with its peers on this machine (a benchmark, not a test):
#
#   tools/compare_pytorch.sh [BUILD_DIR] [REPEATS]
#
# 1. Per-call cost of one float32 allreduce at np 2, of 1 element and of 1 MiB: hvd.allreduce
#    and hvd.synchronize(hvd.allreduce_async(..)) from Python, hvd_allreduce from C
#    (tools/hvd_allreduce_perf), torch.distributed.all_reduce with gloo, and Horovod 0.28.1's
#    own hvd.allreduce with its Gloo and its MPI controller (median per call, slowest rank).
# 2. tools/pytorch_synthetic_benchmark.py (MLP 784-1024-1024-1024-10, batch 8 per rank) at
#    np 1, 2 and 4: hvd, torch DDP with gloo, Horovod 0.28.1 (Gloo and MPI controllers), and
#    no communication at all (the limit perfect overlap would reach), total img/s.
# Each measurement runs REPEATS times (default 3), the peers interleaved so that the machine's
# drift hits all alike; every figure is printed, then the medians.
# 3. At np 2 and 4, the same benchmark with --paired: hvd against no communication inside one
#    job, iteration by iteration (this machine drifts 20-30 % between runs), and the ceiling
#    any synchronous step has here (each step waits for the slowest rank).
#
# Horovod is the real one, built by ../shared/anchors/horovod/build.sh (about 5 minutes):
# HOROVOD_REF_ENV names the env.sh that build writes (default /tmp/hvdref/env.sh, the build's
# default place); without it the Horovod rows are left out (said so at the top). Its MPI
# controller runs under Open MPI's mpirun (openmpi-bin).
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
run="$build/horovodrun"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
py=/usr/bin/python3

ref_env=${HOROVOD_REF_ENV:-${TMPDIR:-/tmp}/hvdref/env.sh}
ref_ctls=()
if [[ -f $ref_env ]]; then
  ref_ctls=(gloo mpi)
  echo "Horovod 0.28.1 from $ref_env"
else
  echo "no Horovod 0.28.1 build at $ref_env (../shared/anchors/horovod/build.sh): its rows are left out"
fi
# Horovod's own horovodrun, with only its own package on the path.
horovod_ref() { # controller, then horovodrun's arguments
  local ctl=$1
  shift
  # shellcheck disable=SC1090 # the anchor build writes it
  (unset PYTHONPATH; source "$ref_env"; horovodrun "--$ctl" "$@")
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

declare -A got
note() { got[$1]+="$2 "; }
med() { tr ' ' '\n' <<<"${got[$1]:-}" | grep . | median; }
# The per-call figure of form (the line's label) for count elements in the latency tool's output.
percall() { # output, label, count
  grep -F "$2: " <<<"$1" | grep " $3 float32" | sed -E 's/.*median ([0-9.]+) us.*/\1/' | head -1
}
lat="$here/pytorch_allreduce_latency.py"

echo "== per-call allreduce cost, np 2 (us, median per call)"
for ((i = 1; i <= repeats; i++)); do
  out=$("$run" -np 2 $py "$lat" 2>&1 | grep median)
  note probe "$(sed -nE 's/.*cpu probe ([0-9.]+) ms.*/\1/p' <<<"$out" | head -1)"
  for c in 1 262144; do
    note "py$c" "$(percall "$out" hvd.allreduce $c)"
    note "pya$c" "$(percall "$out" hvd.allreduce_async+synchronize $c)"
  done
  out=$("$run" -np 2 $py "$lat" --gloo 2>&1 | grep median)
  for c in 1 262144; do note "gl$c" "$(percall "$out" "torch.distributed.all_reduce (gloo)" $c)"; done
  for bytes in 4 1048576; do
    t=$("$run" -np 2 "$build/tools/hvd_allreduce_perf" -b $bytes -e $bytes -n 2000 -w 200 2>&1 |
      sed 's/^\[0\]<stdout>://' | awk -v b=$bytes '$1 == b {print $6; exit}')
    note "c$((bytes / 4))" "$t"
  done
  for ctl in "${ref_ctls[@]}"; do
    # (about 1 ms a call and more: fewer calls)
    out=$(horovod_ref "$ctl" -np 2 $py "$lat" --iters 300 --warmup 30 2>&1 | grep median)
    for c in 1 262144; do
      note "pcref$ctl$c" "$(percall "$out" hvd.allreduce $c)"
      note "pcrefa$ctl$c" "$(percall "$out" hvd.allreduce_async+synchronize $c)"
    done
  done
done
row() { printf '%-46s %-30s %s\n' "$1" "$2" "$3"; }
row "" "1 float32" "262144 float32 (1 MiB)"
row "hvd.allreduce (Python)" "${got[py1]}" "${got[py262144]}"
row "hvd.allreduce_async + synchronize (Python)" "${got[pya1]}" "${got[pya262144]}"
row "hvd_allreduce (C)" "${got[c1]}" "${got[c262144]}"
row "torch.distributed gloo" "${got[gl1]}" "${got[gl262144]}"
row "cpu probe of hvd's run (ms; ~2x in a slow phase)" "${got[probe]}" ""
for ctl in "${ref_ctls[@]}"; do
  row "Horovod 0.28.1 ($ctl) hvd.allreduce" "${got[pcref${ctl}1]}" "${got[pcref${ctl}262144]}"
  row "Horovod 0.28.1 ($ctl) async + synchronize" "${got[pcrefa${ctl}1]}" "${got[pcrefa${ctl}262144]}"
done
printf 'medians (1 float32 / 1 MiB): hvd.allreduce %s / %s, async %s / %s, C %s / %s, gloo %s / %s' \
  "$(med py1)" "$(med py262144)" "$(med pya1)" "$(med pya262144)" "$(med c1)" "$(med c262144)" \
  "$(med gl1)" "$(med gl262144)"
for ctl in "${ref_ctls[@]}"; do
  printf ', Horovod %s %s / %s' "$ctl" "$(med "pcref${ctl}1")" "$(med "pcref${ctl}262144")"
done
echo

echo
echo "== synthetic benchmark, MLP 784-1024-1024-1024-10, batch 8 per rank (total img/s)"
bench="$here/pytorch_synthetic_benchmark.py"
imgs() { sed -nE 's/.*Total img\/sec on [0-9]+ rank\(s\): ([0-9.]+).*/\1/p'; }
modes=(hvd ddp none)
for ctl in "${ref_ctls[@]}"; do modes+=("ref$ctl"); done
for np in 1 2 4; do
  for ((i = 1; i <= repeats; i++)); do
    for mode in "${modes[@]}"; do
      case $mode in
        hvd) t=$("$run" -np $np $py "$bench" 2>&1 | imgs) ;;
        ddp) t=$("$run" -np $np $py "$bench" --ddp 2>&1 | imgs) ;;
        none) t=$("$run" -np $np $py "$bench" --no-comm 2>&1 | imgs) ;;
        ref*) t=$(horovod_ref "${mode#ref}" -np $np $py "$bench" 2>&1 | imgs) ;;
      esac
      note "$mode$np" "$t"
    done
  done
  line="np $np: hvd ${got[hvd$np]}| DDP ${got[ddp$np]}| none ${got[none$np]}"
  for ctl in "${ref_ctls[@]}"; do line+="| Horovod $ctl ${got[ref$ctl$np]}"; done
  echo "$line"
  m_hvd=$(med "hvd$np") m_ddp=$(med "ddp$np") m_none=$(med "none$np")
  line=$(awk -v h="$m_hvd" -v d="$m_ddp" -v n="$m_none" -v np=$np 'BEGIN {
    printf "np %d medians: hvd %.1f, DDP %.1f, no communication %.1f; hvd/DDP %.2f, hvd/none %.2f",
      np, h, d, n, h / d, h / n }')
  for ctl in "${ref_ctls[@]}"; do
    line+=$(awk -v h="$m_hvd" -v r="$(med "ref$ctl$np")" -v c="$ctl" 'BEGIN {
      printf "; Horovod %s %.1f (hvd/Horovod %.2f)", c, r, (r > 0 ? h / r : 0) }')
  done
  echo "$line"
  [[ $np == 1 ]] && one=$m_hvd
  awk -v h="$m_hvd" -v o="$one" -v np=$np 'BEGIN {
    printf "np %d scaling efficiency of hvd: %.2f\n", np, h / (np * o) }'
done

echo
echo "== paired in one job: hvd/no-communication per iteration, and the synchronous-step ceiling"
for np in 2 4; do
  for ((i = 1; i <= repeats; i++)); do
    out=$("$run" -np $np $py "$bench" --paired 2>&1)
    note "pair$np" "$(sed -nE 's/.*Paired hvd\/no-communication: median ([0-9.]+).*/\1/p' <<<"$out")"
    note "ceil$np" "$(sed -nE 's/.*ceiling.*: ([0-9.]+)$/\1/p' <<<"$out")"
  done
  echo "np $np: hvd/none paired ${got[pair$np]}(median $(med "pair$np")); ceiling ${got[ceil$np]}(median $(med "ceil$np"))"
done
