#!/usr/bin/env bash
# hvd jobs under a real Slurm (tests/slurm/cluster.sh, three hosts) when things go wrong, each
# on the collectives suite's soak mode under srun --mpi=pmix:
#   1. scancel of a running job: every rank gone within 10 s;
#   2. a node lost mid-job (every process of h3 SIGKILLed: its slurmd, slurmstepd and ranks):
#      the ranks on h1 and h2 fail naming a rank of h3 and are gone (1 s here; the bound is
#      30 s, which a CI machine at load 35 needed), and srun ends with an error once Slurm
#      declares h3 dead;
#   3. a node's slurmd killed mid-job (its ranks keep running): Slurm ends the job, srun
#      names the node and the node failure, and every rank on both nodes is gone.
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns, sshd or Slurm).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_test_setup faults
CHECK=$HVD_BUILD_DIR/tests/mrank/collectives_check

# soak_job DIR [NODES]: the suite's soak mode on 2 ranks of each of NODES (default 3) nodes in
# the background (output in DIR/out), once every rank has written its pid and started its
# collectives
soak_job() {
  local nodes=${2:-3}
  mkdir -p "$1"
  chmod 777 "$1"
  touch "$1/go"
  (on1 150 srun --mpi=pmix -N "$nodes" --ntasks-per-node 2 "$CHECK" --mode soak --dir "$1" \
    --seconds 100 >"$1/out" 2>&1) &
  job=$!
  local i
  for ((i = 0; i < 600; i++)); do
    (($(find "$1" -name 'pid.*' | wc -l) == nodes * 2)) && break
    sleep 0.1
  done
  (($(find "$1" -name 'pid.*' | wc -l) == nodes * 2)) || fail "the soak job did not start: $(tail -10 "$1/out")"
  sleep 1 # into the collectives
}
ranks_alive() { # how many ranks of DIR still run
  local f n=0
  for f in "$1"/pid.*; do
    if pid_alive "$(cat "$f")"; then n=$((n + 1)); fi
  done
  echo "$n"
}
# gone_within SECONDS DIR: 0 once no rank of DIR runs; the seconds it took in $took
gone_within() {
  local i t0=$SECONDS
  for ((i = 0; i < $1 * 10; i++)); do
    if (($(ranks_alive "$2") == 0)); then
      took=$((SECONDS - t0))
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# 1. scancel: every rank on every node gone within 10 s, srun ends
soak_job "$TMP/cancel"
jobid=$(on1 20 squeue -h -o %i | head -1)
[[ $jobid =~ ^[0-9]+$ ]] || fail "no job id from squeue: '$jobid'"
on1 20 scancel "$jobid"
gone_within 10 "$TMP/cancel" || fail "$(ranks_alive "$TMP/cancel") ranks still running 10 s after scancel"
ok "scancel $jobid: all 6 ranks gone after ${took} s"
for ((i = 0; i < 100; i++)); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && fail "srun still running 10 s after its ranks were gone"
wait "$job" || true

# 2. a node crash: every process of h3 SIGKILLed at once
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
# 3. a node's slurmd killed mid-job (h2; h3 is down since 2): its ranks go on running under
# their slurmstepd until Slurm declares h2 dead and ends the job; the job's ranks on h1 are
# then killed by their slurmd, those on h2 fail as their peers are lost, srun ends with an
# error naming h2 and the node failure, and nothing of the job is left on either node.
soak_job "$TMP/slurmd" 2
kill -9 "$(cat "$HVD_SLURM_DIR/h2/slurmd.pid")"
t0=$SECONDS
# (Slurm declares the node dead SlurmdTimeout=10 s after its last answer, at its next
# periodic check: 18-20 s here, once 60 s under CI's load)
gone_within 120 "$TMP/slurmd" || fail "$(ranks_alive "$TMP/slurmd") ranks still running 120 s after h2's slurmd was killed: $(tail -10 "$TMP/slurmd/out")"
ok "h2's slurmd killed: all 4 ranks gone after $((SECONDS - t0)) s"
for ((i = 0; i < 300; i++)); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && fail "srun still running 30 s after its ranks were gone: $(tail -5 "$TMP/slurmd/out")"
rc=0
wait "$job" || rc=$?
((rc != 0)) || fail "srun exited 0 after h2's slurmd was killed"
# (what the ranks on h2 said went to their slurmstepd, whose srun was gone)
grep -Eq 'h2' "$TMP/slurmd/out" || fail "nothing in the job's output names h2: $(tail -10 "$TMP/slurmd/out")"
grep -Eiq 'node failure' "$TMP/slurmd/out" || fail "srun did not report a node failure: $(tail -10 "$TMP/slurmd/out")"
ok "srun exited $rc: $(grep -m1 'h2' "$TMP/slurmd/out")"
echo "PASS: test_faults (slurm)"
