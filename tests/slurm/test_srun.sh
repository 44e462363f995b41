#!/usr/bin/env bash
# hvd jobs started by a real Slurm's srun (tests/slurm/cluster.sh: slurmctld and a slurmd on
# each of three network-namespace hosts), no horovodrun and no ssh:
#   1. srun --mpi=pmix -N 3 --ntasks-per-node 2: the collectives conformance suite on 6 ranks
#      (rank, size and local rank from Slurm, the ranks meeting through Slurm's PMIx, shared
#      memory inside a node and TCP across), and a PyTorch script's places and allreduce,
#      and `horovodrun -np 6` inside `salloc -N 3` (hosts and slots from the allocation,
#      remote ranks started through srun, no ssh), its --dry-run plan, and the same suite;
#      the PyTorch example trained under srun to the same weights digest as under horovodrun
#      on one host (HVD_REPRODUCIBLE=1);
#   2. srun without PMIx: every rank fails at once with the message that says what to do.
# (Failures under Slurm: test_faults.sh.)
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns, sshd or Slurm).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_test_setup srun
CHECK=$HVD_BUILD_DIR/tests/mrank/collectives_check

# 1. the conformance suite on 6 ranks of 3 nodes
t0=$(date +%s.%N)
on1 200 srun --mpi=pmix -N 3 --ntasks-per-node 2 "$CHECK" --quick >"$TMP/out" 2>&1 ||
  fail "srun of the conformance suite: $(tail -20 "$TMP/out")"
t1=$(date +%s.%N)
grep -q 'np=6 quick: [0-9]* checks passed, 0 failed on rank 0, 0 on all ranks' "$TMP/out" ||
  fail "no clean result: $(tail -20 "$TMP/out")"
ok "srun --mpi=pmix -N 3 --ntasks-per-node 2: the conformance suite passed ($(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s)"

# 1a. a Horovod-style PyTorch script under srun: every rank's place and an allreduce's sum
if [[ -d $HVD_BUILD_DIR/python/horovod ]]; then
  cat >"$TMP/allreduce.py" <<'EOF'
import torch
import horovod.torch as hvd
hvd.init()
s = hvd.allreduce(torch.ones(4) * (hvd.rank() + 1), op=hvd.Sum)
print(f"rank {hvd.rank()}/{hvd.size()} local {hvd.local_rank()}/{hvd.local_size()} "
      f"cross {hvd.cross_rank()}/{hvd.cross_size()} sum {s.tolist()}", flush=True)
hvd.shutdown()
EOF
  on1 200 srun --mpi=pmix -N 3 --ntasks-per-node 2 env PYTHONPATH="$HVD_BUILD_DIR/python" \
    /usr/bin/python3 "$TMP/allreduce.py" >"$TMP/out" 2>&1 || fail "srun of a PyTorch script: $(tail -20 "$TMP/out")"
  for r in 0 1 2 3 4 5; do
    grep -q "^rank $r/6 local $((r % 2))/2 cross $((r / 2))/3 sum \[21.0, 21.0, 21.0, 21.0\]\$" "$TMP/out" ||
      fail "srun of a PyTorch script: rank $r: $(cat "$TMP/out")"
  done
  ok "srun --mpi=pmix of a PyTorch script (import horovod.torch as hvd): places and sums right"
fi

# 1b. horovodrun inside an allocation: hosts and slots from Slurm, remote ranks through srun
# (the bed's ssh needs its own config, which is not given here: ssh could not reach h2 or h3)
on1 60 salloc -N 3 --ntasks-per-node 2 "$HVD_BUILD_DIR/horovodrun" --dry-run -np 6 true \
  >"$TMP/out" 2>&1 || fail "horovodrun --dry-run in salloc: $(tail -10 "$TMP/out")"
for r in 0 1 2 3 4 5; do
  grep -q "^rank=$r size=6 local_rank=$((r % 2)) local_size=2 cross_rank=$((r / 2)) cross_size=3 host=h$((r / 2 + 1))\$" "$TMP/out" ||
    fail "--dry-run in salloc -N 3 --ntasks-per-node 2: no line for rank $r: $(cat "$TMP/out")"
done
ok "horovodrun --dry-run -np 6 in salloc -N 3: the allocation's plan (h1 h1 h2 h2 h3 h3)"
t0=$(date +%s.%N)
on1 200 salloc -N 3 --ntasks-per-node 2 "$HVD_BUILD_DIR/horovodrun" --verbose -np 6 "$CHECK" \
  --quick >"$TMP/out" 2>&1 || fail "horovodrun in salloc: $(grep -v '<stderr>:\[20' "$TMP/out" | tail -20)"
t1=$(date +%s.%N)
grep -q 'np=6 quick: [0-9]* checks passed, 0 failed on rank 0, 0 on all ranks' "$TMP/out" ||
  fail "no clean result from horovodrun in salloc: $(tail -20 "$TMP/out")"
grep -q '^srun .*--nodelist=h2 .*--internal-exec' "$TMP/out" || fail "h2 not reached through srun: $(grep -v '<stderr>:\[20' "$TMP/out" | tail -20)"
ok "horovodrun -np 6 in salloc -N 3 (no -H): the conformance suite passed, remote ranks through srun ($(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s)"

# 1c. the PyTorch example trains to the same bits under srun on 3 nodes as under horovodrun
# on one host, with HVD_REPRODUCIBLE=1 (every gradient element summed in rank order: without
# it, an element's order across hosts depends on where fusion put it, README "Running under
# Slurm")
example_args=(/usr/bin/python3 "$HVD_SOURCE_DIR/examples/pytorch/pytorch_fashion_mnist.py"
  --epochs 1 --train-limit 1200 --test-limit 300)
digest_of() { # WHAT FILE: the example's digest line in FILE
  grep -ao 'weights digest [0-9a-f]* (the same on all 6 ranks)' "$2" ||
    fail "no digest from the example $1: $(tail -20 "$2")"
}
if [[ -d $HVD_BUILD_DIR/python/horovod && -d /usr/share/datasets/fashion-mnist ]]; then
  on1 200 srun --mpi=pmix -N 3 --ntasks-per-node 2 env HVD_REPRODUCIBLE=1 \
    PYTHONPATH="$HVD_BUILD_DIR/python" "${example_args[@]}" >"$TMP/out" 2>&1 ||
    fail "the PyTorch example under srun: $(tail -20 "$TMP/out")"
  d_srun=$(digest_of "under srun" "$TMP/out")
  (cd "$TMP" && HVD_REPRODUCIBLE=1 PYTHONPATH="$HVD_BUILD_DIR/python" timeout -k 5 200 \
    "$HVD_BUILD_DIR/horovodrun" -np 6 "${example_args[@]}" >"$TMP/out" 2>&1) ||
    fail "the PyTorch example under horovodrun -np 6 on this machine: $(tail -20 "$TMP/out")"
  d_one=$(digest_of "on one host" "$TMP/out")
  [[ "$d_srun" == "$d_one" ]] || fail "srun on 3 nodes: $d_srun; horovodrun on one host: $d_one"
  ok "the PyTorch example under srun on 3 nodes and under horovodrun on one host: $d_srun"
fi

# 2. without PMIx the ranks cannot meet: each says so at once, and how to start it
rc=0
on1 60 srun --mpi=none -N 2 --ntasks-per-node 1 "$CHECK" --quick >"$TMP/out" 2>&1 || rc=$?
((rc != 0)) || fail "srun --mpi=none succeeded: $(tail -5 "$TMP/out")"
# shellcheck disable=SC2016 # the backquotes are the message's
n=$(grep -o 'rank [01] of 2 was started by srun without PMIx (--mpi=none): start it with `srun --mpi=pmix`' "$TMP/out" | sort -u | wc -l)
((n == 2)) || fail "$n of 2 ranks named the missing PMIx: $(tail -10 "$TMP/out")"
ok "srun --mpi=none: both ranks fail at once, saying to use --mpi=pmix"
echo "PASS: test_srun"
