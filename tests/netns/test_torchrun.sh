#!/usr/bin/env bash
# torchrun across hosts on the "hvd" backend: two network-namespace hosts (tests/netns/
# netbed.sh, host names h1 and h2), one torchrun on each with --nnodes 2 and torch's c10d
# rendezvous on h1 (tests/python/jobs/ddp_job.py):
#   1. DDP trains across the hosts (a worker on each) and ends with exactly the weights the
#      same job ends with on gloo (a sum of two values is the same in any order; of four it
#      is not, bit for bit).
#   2. --max-restarts 1 with a worker SIGKILLed mid-training: both hosts' workers start
#      again and resume from the checkpoint. torchrun 2 keeps one store for every round and
#      the agents may disagree on the restart count, so the new workers must not read the
#      dead ones' keys (horovod/torch/store_attempt.py).
# HVD_PYTHON: the interpreter (torch 2's torchrun is the point; set by tests/netns/netns.cmake).
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns or sshd, no interpreter with torch).
set -euo pipefail
: "${HVD_BUILD_DIR:?set by ctest}" "${HVD_SOURCE_DIR:?set by ctest}" "${HVD_PYTHON:?set by ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns_require test_torchrun
"$HVD_PYTHON" -c 'import torch.distributed.run' 2>/dev/null || netns_skip "$HVD_PYTHON has no torch"

TMP=$(mktemp -d /tmp/hvd-torchrun.XXXXXX)
netns_tmp=$TMP
netns_bed_up 2 --hostnames
export PYTHONPATH=$HVD_BUILD_DIR/python PYTHONDONTWRITEBYTECODE=1
JOB=$HVD_SOURCE_DIR/tests/python/jobs/ddp_job.py
TORCHRUN_ARGS=()

# torchrun_pair OUT_DIR JOB_ARGS...: one torchrun per host (with TORCHRUN_ARGS, an array) with
# one worker each, both to the
# end (180 s at most; netns_cleanup ends whatever is left in the bed); their output in
# OUT_DIR/h<i>.log; fails naming the host whose agent failed
torchrun_pair() {
  local out=$1
  shift
  mkdir -p "$out"
  local port=$((20000 + RANDOM % 10000)) id pids=() h rc=0
  id=$(basename "$out")-$RANDOM
  for h in h1 h2; do
    # (the c10d rendezvous store listens on h1; the agent of h2 joins it there)
    bash "$netbed" exec "$h" timeout -k 5 180 "$HVD_PYTHON" -m torch.distributed.run --nnodes 2 \
      --nproc_per_node 1 --rdzv-backend c10d --rdzv-endpoint "h1:$port" --rdzv-id "$id" \
      "${TORCHRUN_ARGS[@]}" "$JOB" "$@" </dev/null >"$out/$h.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || {
      rc=$?
      echo "torchrun on h$((i + 1)) exited $rc; its workers' errors and its last lines:"
      grep -E "^\[rank[0-9]+\]:[A-Za-z.]*(Error|Exception)|\] \[[0-9]+\]: " "$out/h$((i + 1)).log" | tail -20
      tail -25 "$out/h$((i + 1)).log"
    }
  done
  return "$rc"
}

# 1. DDP across the hosts, on gloo and on hvd -----------------------------------------------
for backend in gloo hvd; do
  torchrun_pair "$TMP/$backend" "$backend" "$TMP/$backend" train ||
    fail "DDP on $backend across h1 and h2 failed"
done
"$HVD_PYTHON" - "$TMP/gloo/weights.pt" "$TMP/hvd/weights.pt" <<'PY' || fail "DDP across hosts: hvd's weights differ from gloo's"
import sys, torch
g, h = torch.load(sys.argv[1]), torch.load(sys.argv[2])
bad = [k for k in g if not torch.equal(g[k], h[k])]
sys.exit(f"differ: {bad}" if bad else 0)
PY
ok "DDP on hvd across 2 hosts (torchrun's c10d rendezvous) ends with gloo's weights"

# 2. a worker killed, both hosts' workers restarted from the checkpoint ----------------------
TORCHRUN_ARGS=(--max-restarts 1)
torchrun_pair "$TMP/resume" hvd "$TMP/resume" resume 1 || fail "a restart across h1 and h2 failed"
[[ -e $TMP/resume/killed ]] || fail "rank 1 was never killed"
"$HVD_PYTHON" - "$TMP/resume" <<'PY' || fail "the restart across hosts did not resume from the checkpoint"
import sys
done = [open(f"{sys.argv[1]}/done{r}").read().split() for r in range(2)]
assert all(int(start) >= 5 for start, _, _ in done), done  # from the first attempt's checkpoint
assert done[0][2] == done[1][2], done  # the same weights on both
print("restart counts", [d[1] for d in done])
PY
ok "a worker killed on one of 2 hosts: torchrun restarts both, which resume from the checkpoint"
