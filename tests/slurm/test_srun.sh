#!/usr/bin/env bash
# hvd jobs started by a real Slurm's srun (tests/slurm/cluster.sh: slurmctld and a slurmd on
# each of three network-namespace hosts), no horovodrun and no ssh:
#   1. srun --mpi=pmix -N 3 --ntasks-per-node 2: the collectives conformance suite on 6 ranks
#      (rank, size and local rank from Slurm, the ranks meeting through Slurm's PMIx, shared
#      memory inside a node and TCP across), and a PyTorch script's places and allreduce,
#      and `horovodrun -np 6` inside `salloc -N 3` (hosts and slots from the allocation,
#      remote ranks started through srun, no ssh), its --dry-run plan, and the same suite;
#      the PyTorch example trained under both to the same weights digest;
#   2. srun without PMIx: every rank fails at once with the message that says what to do;
#   3. scancel of a running job: every rank gone within 10 s;
#   4. a node lost mid-job (every process of h3 SIGKILLed: its slurmd, slurmstepd and ranks):
#      the ranks on h1 and h2 fail naming a rank of h3 and are gone (1 s here; the bound is
#      30 s, which a CI machine at load 35 needed), and srun ends with an
#      error once Slurm declares h3 dead.
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

# 1c. the PyTorch example trains to the same bits under srun and under horovodrun in the
# allocation. (Fusion off: which gradients share a fused buffer depends on timing, and across
# hosts an element's place in the buffer decides its reduction order around the ring.)
example() { # LAUNCH...: the example's digest line, run by LAUNCH inside h1
  on1 200 "$@" env HOROVOD_FUSION_THRESHOLD=0 PYTHONPATH="$HVD_BUILD_DIR/python" /usr/bin/python3 \
    "$HVD_SOURCE_DIR/examples/pytorch/pytorch_fashion_mnist.py" --epochs 1 --train-limit 1200 \
    --test-limit 300 >"$TMP/out" 2>&1 || fail "the PyTorch example under $1: $(tail -20 "$TMP/out")"
  grep -ao 'weights digest [0-9a-f]* (the same on all 6 ranks)' "$TMP/out" ||
    fail "no digest from the example under $1: $(tail -20 "$TMP/out")"
}
if [[ -d $HVD_BUILD_DIR/python/horovod && -d /usr/share/datasets/fashion-mnist ]]; then
  d_srun=$(example srun --mpi=pmix -N 3 --ntasks-per-node 2)
  d_hvd=$(example salloc -N 3 --ntasks-per-node 2 "$HVD_BUILD_DIR/horovodrun" -np 6)
  [[ "$d_srun" == "$d_hvd" ]] || fail "srun: $d_srun; horovodrun in salloc: $d_hvd"
  ok "the PyTorch example under srun and under horovodrun in salloc: $d_srun"
fi

# 2. without PMIx the ranks cannot meet: each says so at once, and how to start it
rc=0
on1 60 srun --mpi=none -N 2 --ntasks-per-node 1 "$CHECK" --quick >"$TMP/out" 2>&1 || rc=$?
((rc != 0)) || fail "srun --mpi=none succeeded: $(tail -5 "$TMP/out")"
# shellcheck disable=SC2016 # the backquotes are the message's
n=$(grep -o 'rank [01] of 2 was started by srun without PMIx (--mpi=none): start it with `srun --mpi=pmix`' "$TMP/out" | sort -u | wc -l)
((n == 2)) || fail "$n of 2 ranks named the missing PMIx: $(tail -10 "$TMP/out")"
ok "srun --mpi=none: both ranks fail at once, saying to use --mpi=pmix"

# soak_job DIR: the suite's soak mode on 6 ranks in the background (output in DIR/out), once
# every rank has written its pid and started its collectives
soak_job() {
  mkdir -p "$1"
  chmod 777 "$1"
  touch "$1/go"
  (on1 150 srun --mpi=pmix -N 3 --ntasks-per-node 2 "$CHECK" --mode soak --dir "$1" \
    --seconds 100 >"$1/out" 2>&1) &
  job=$!
  local i
  for ((i = 0; i < 600; i++)); do
    (($(find "$1" -name 'pid.*' | wc -l) == 6)) && break
    sleep 0.1
  done
  (($(find "$1" -name 'pid.*' | wc -l) == 6)) || fail "the soak job did not start: $(tail -10 "$1/out")"
  sleep 1 # into the collectives
}
ranks_alive() { # the ranks of DIR still running
  local f p n=0
  for f in "$1"/pid.*; do
    p=$(cat "$f")
    [[ -e /proc/$p && "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)" != Z ]] && n=$((n + 1))
  done
  echo "$n"
}
# gone_within SECONDS DIR: 0 once no rank of DIR runs; the seconds it took in $took
gone_within() {
  local i t0=$SECONDS
  for ((i = 0; i < $1 * 10; i++)); do
    (($(ranks_alive "$2") == 0)) && break
    sleep 0.1
  done
  took=$((SECONDS - t0))
  (($(ranks_alive "$2") == 0))
}

# 3. scancel: every rank on every node gone within 10 s, srun ends
soak_job "$TMP/cancel"
jobid=$(on1 20 squeue -h -o %i | head -1)
[[ $jobid =~ ^[0-9]+$ ]] || fail "no job id from squeue: '$jobid'"
on1 20 scancel "$jobid"
gone_within 10 "$TMP/cancel" || fail "$(ranks_alive "$TMP/cancel") ranks still running 10 s after scancel"
ok "scancel $jobid: all 6 ranks gone after ${took} s"
for ((i = 0; i < 100; i++)); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && fail "srun still running 10 s after its ranks were gone"
wait "$job" || true

# 4. a node crash: every process of h3 SIGKILLed at once
soak_job "$TMP/crash"
mapfile -t h3 < <(ip netns pids "${HVD_NETBED_PREFIX}h3")
h3_ranks=0
for f in "$TMP"/crash/pid.*; do
  if printf '%s\n' "${h3[@]}" | grep -qx "$(cat "$f")"; then h3_ranks=$((h3_ranks + 1)); fi
done
((h3_ranks == 2)) || fail "$h3_ranks ranks on h3, expected 2"
for p in "${h3[@]}"; do
  [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == sshd ]] && continue # the bed's, not Slurm's
  kill -9 "$p" 2>/dev/null || true
done
gone_within 30 "$TMP/crash" || fail "$(ranks_alive "$TMP/crash") ranks still running 30 s after h3 crashed: $(tail -10 "$TMP/crash/out")"
grep -Eq 'rank [45] \(host h3' "$TMP/crash/out" || fail "no survivor named a rank of h3: $(tail -10 "$TMP/crash/out")"
ok "h3 crashed: the 4 ranks on h1 and h2 failed naming a rank of h3, all gone after ${took} s"
# srun itself ends once Slurm declares h3 dead (SlurmdTimeout=10 in cluster.sh), with an error
t0=$SECONDS
for ((i = 0; i < 400; i++)); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && fail "srun still running 40 s after h3 crashed: $(tail -5 "$TMP/crash/out")"
rc=0
wait "$job" || rc=$?
((rc != 0)) || fail "srun exited 0 after h3 crashed"
ok "srun ended $((SECONDS - t0)) s later with exit status $rc"
echo "PASS: test_srun"
