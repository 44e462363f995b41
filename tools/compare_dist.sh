#!/usr/bin/env bash
# hvd's torch.distributed backend side by side with gloo on this machine (a benchmark, not a
# test):
#
#   tools/compare_dist.sh [BUILD_DIR] [REPEATS] [NPS] [BATCHES]
#
# 1. Per-call cost of torch.distributed.all_reduce of one float32 and of 1 MiB, on the "hvd"
#    backend and on gloo, and of horovod.torch's hvd.allreduce for reference
#    (tools/pytorch_allreduce_latency.py: median over the calls of the slowest rank, us).
# 2. A DDP training step (tools/ddp_step_interleaved.py, which runs every peer in one job,
#    taken in turn: DDP on hvd and on gloo, horovod.torch's DistributedOptimizer, both DDPs
#    tuned, DDP synchronizing only, FSDP on hvd and on gloo (torch 2), no exchange) at batch 8
#    and 64 per rank, REPEATS jobs.
# horovodrun launches every job (torch.distributed's ranks come from it: the world is the
# job's for hvd, gloo meets at MASTER_ADDR). Each measurement runs REPEATS times (default 3),
# the peers interleaved so that the machine's drift hits all alike; part 1 prints every
# figure, then the medians. NPS: the rank counts (default "2 4"); BATCHES: the batch sizes
# per rank of part 2 (default "8 64"); SKIP_ALLREDUCE=1 runs part 2 only.
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
nps=${3:-"2 4"}
batches=${4:-"8 64"}
here=$(cd "$(dirname "$0")" && pwd)
run="$build/horovodrun"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
# PY: the interpreter (default: the venv with PyPI's torch 2.13 that scripts/install-deps.sh
# makes, else Debian's python3 and its torch 1.13)
venv_py=${HVD_TORCH_VENV:-/opt/hvd/venv-torch2.13}/bin/python
if [[ -n ${PY:-} ]]; then py=$PY; elif [[ -x $venv_py ]]; then py=$venv_py; else py=/usr/bin/python3; fi
echo "(python: $py, torch $($py -c 'import torch; print(torch.__version__)'))"

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
echo "== DDP step, MLP 784-1024-1024-1024-10 (tools/ddp_step_interleaved.py: every peer in one job)"
for batch in $batches; do
  for np in $nps; do
    for ((i = 1; i <= repeats; i++)); do
      echo "-- np $np, batch $batch per rank, run $i"
      "$run" -np "$np" $py "$here/ddp_step_interleaved.py" --batch-size "$batch" 2>&1 |
        sed -nE 's/^\[0\]<stdout>:  /  /p'
    done
  done
done
