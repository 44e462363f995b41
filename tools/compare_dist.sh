#!/usr/bin/env bash
# hvd's torch.distributed backend side by side with gloo on this machine (a benchmark, not a
# test):
#
#   tools/compare_dist.sh [BUILD_DIR] [REPEATS] [NPS] [BATCHES]
#
# 1. Per-call cost of torch.distributed.all_reduce of one float32 and of 1 MiB, on the "hvd"
#    backend and on gloo, and of horovod.torch's hvd.allreduce for reference
#    (tools/pytorch_allreduce_latency.py: median over the calls of the slowest rank, us).
# 2. A DDP training step (tools/pytorch_synthetic_benchmark.py --ddp: the MLP
#    784-1024-1024-1024-10, 11.6 MB of gradients) at batch 8 and 64 per rank, on hvd and on
#    gloo, against horovod.torch's DistributedOptimizer on the same model, against DDP with a
#    communication hook that sends nothing (what DDP itself costs, ranks never waiting for
#    each other), against DDP with a hook that only synchronizes the ranks (a one-element
#    allreduce per bucket: the limit of any backend, whose ranks wait for the slowest as
#    this one's do, were its data moved for free), and against no communication at all
#    (total img/s).
# horovodrun launches every job (torch.distributed's ranks come from it: the world is the
# job's for hvd, gloo meets at MASTER_ADDR). Each measurement runs REPEATS times (default 3),
# the peers interleaved so that the machine's drift hits all alike; every figure is printed,
# then the medians. NPS: the rank counts (default "2 4"); BATCHES: the batch sizes per rank
# of part 2 (default "8 64"); SKIP_ALLREDUCE=1 runs part 2 only.
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
nps=${3:-"2 4"}
batches=${4:-"8 64"}
here=$(cd "$(dirname "$0")" && pwd)
run="$build/horovodrun"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
py=/usr/bin/python3

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
declare -A got
note() { got[$1]+="$2 "; }

[[ ${SKIP_ALLREDUCE:-0} == 1 ]] || echo "== torch.distributed.all_reduce per call (us, median per call, slowest rank)"
for np in $nps; do
  [[ ${SKIP_ALLREDUCE:-0} == 1 ]] && break
  for ((i = 1; i <= repeats; i++)); do
    for peer in hvd gloo py; do
      flag="--dist $peer"
      [[ $peer == py ]] && flag=""
      # (with hvd the tool times allreduce_async + synchronize too: the blocking row only)
      out=$("$run" -np "$np" $py "$here/pytorch_allreduce_latency.py" $flag 2>&1 | grep median |
        grep -v allreduce_async)
      note "$peer$np.1" "$(grep ' 1 float32' <<<"$out" | sed -E 's/.*median ([0-9.]+) us.*/\1/')"
      note "$peer$np.m" "$(grep '262144 float32' <<<"$out" | sed -E 's/.*median ([0-9.]+) us.*/\1/')"
    done
  done
  for size in 1 m; do
    label=$([[ $size == 1 ]] && echo "1 float32" || echo "1 MiB")
    h=$(median <<<"${got[hvd$np.$size]}")
    g=$(median <<<"${got[gloo$np.$size]}")
    p=$(median <<<"${got[py$np.$size]}")
    echo "np $np, $label: dist hvd ${got[hvd$np.$size]}| gloo ${got[gloo$np.$size]}| hvd.allreduce ${got[py$np.$size]}"
    awk -v h="$h" -v g="$g" -v p="$p" -v np="$np" -v l="$label" 'BEGIN {
      printf "np %d, %s medians: dist hvd %.1f, gloo %.1f, hvd.allreduce %.1f; gloo/hvd %.1fx\n",
        np, l, h, g, p, g / h }'
  done
done

echo
echo "== DDP step, MLP 784-1024-1024-1024-10 (total img/s)"
for batch in $batches; do
  for np in $nps; do
    for ((i = 1; i <= repeats; i++)); do
      for mode in hvd gloo dopt noop sync none; do
        case $mode in
          hvd) flag="--ddp --ddp-backend hvd" ;; gloo) flag="--ddp" ;; dopt) flag="" ;;
          noop) flag="--ddp --ddp-backend hvd --ddp-noop-hook" ;; none) flag="--no-comm" ;;
          sync) flag="--ddp --ddp-backend hvd --ddp-sync-hook" ;;
        esac
        t=$("$run" -np "$np" $py "$here/pytorch_synthetic_benchmark.py" --batch-size "$batch" $flag 2>&1 |
          sed -nE 's/.*Total img\/sec on [0-9]+ rank\(s\): ([0-9.]+).*/\1/p')
        note "$mode$np.$batch" "$t"
      done
    done
    h=$(median <<<"${got[hvd$np.$batch]}")
    g=$(median <<<"${got[gloo$np.$batch]}")
    d=$(median <<<"${got[dopt$np.$batch]}")
    o=$(median <<<"${got[noop$np.$batch]}")
    n=$(median <<<"${got[none$np.$batch]}")
    y=$(median <<<"${got[sync$np.$batch]}")
    echo "np $np batch $batch: DDP hvd ${got[hvd$np.$batch]}| DDP gloo ${got[gloo$np.$batch]}| DistributedOptimizer ${got[dopt$np.$batch]}| DDP sending nothing ${got[noop$np.$batch]}| DDP synchronizing only ${got[sync$np.$batch]}| none ${got[none$np.$batch]}"
    awk -v h="$h" -v g="$g" -v d="$d" -v o="$o" -v y="$y" -v n="$n" -v np="$np" -v b="$batch" 'BEGIN {
      printf "np %d batch %d medians: DDP hvd %.1f, DDP gloo %.1f, DistributedOptimizer %.1f, DDP sending nothing %.1f, DDP synchronizing only %.1f, none %.1f; step time hvd/gloo %.2f, hvd/DistributedOptimizer %.2f, sending-nothing/gloo %.2f, synchronizing-only/gloo %.2f\n",
        np, b, h, g, d, o, y, n, g / h, d / h, g / o, g / y }'
  done
done
