#!/usr/bin/env bash
# An elastic horovodrun job under a real Slurm (tests/slurm/cluster.sh), its hosts from
# scripts/horovodrun-slurm-hosts (the nodes of this user's running jobs of the job's name,
# less drained ones), every remote rank started through srun (no ssh):
#   1. in `salloc -N 2 -J hvdtrain` it trains on h1 and h2;
#   2. a second allocation of the same name (sbatch -w h3 -J hvdtrain) grows it to h3: its
#      rank starts through `srun --jobid` of that allocation;
#   3. h2 drained (scontrol update state=drain): the job goes on on h1 and h3, and nothing of
#      it is left on h2;
#   4. it completes with the worker's exact result.
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns, sshd or Slurm).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_test_setup elastic
WORKER=$HVD_BUILD_DIR/tests/elastic_worker
STEPS=800 # at 40 ms a step, 32 s at least: the job is still running when h2 is drained

(on1 240 bash -c "cd $TMP && exec salloc -N 2 -w h1,h2 --ntasks-per-node 1 -J hvdtrain \
  $HVD_BUILD_DIR/horovodrun -np 2 --min-np 1 --max-np 3 \
  --host-discovery-script $HVD_BUILD_DIR/horovodrun-slurm-hosts \
  $WORKER --steps $STEPS --commit-every 2 --sleep-ms 40" >"$TMP/out" 2>"$TMP/err") &
job=$!

# size_seen N [AFTER]: a commit at world size N (after the first line that matched AFTER)
size_seen() {
  local from=1
  [[ -n "${2:-}" ]] && from=$(grep -an -- "$2" "$TMP/out" | head -1 | cut -d: -f1)
  [[ -n "$from" ]] && tail -n "+$from" "$TMP/out" | grep -aq "commit [0-9]* step [0-9]* size $1 "
}
workers_on() { # HOST: pids of elastic workers in HOST's namespace
  # shellcheck disable=SC2016 # $0 is the inner shell's
  ip netns pids "${HVD_NETBED_PREFIX}$1" | xargs -r -n1 sh -c 'grep -l elastic_worker /proc/$0/cmdline >/dev/null 2>&1 && echo $0' || true
}
none_on() { [[ -z "$(workers_on "$1")" ]]; }
show() { echo "--- out:"; tail -5 "$TMP/out"; echo "--- err:"; grep -av 'W elastic.c' "$TMP/err" | tail -20; }

# 1.
wait_until 90 size_seen 2 || fail "no training on h1 and h2: $(show)"
[[ -n "$(workers_on h2)" ]] || fail "no worker on h2: $(show)"
ok "training on h1 and h2 of the allocation (hosts from horovodrun-slurm-hosts)"

# 2.
t0=$SECONDS
on1 30 sbatch -N 1 -w h3 --ntasks-per-node 1 -J hvdtrain -o /dev/null --wrap 'sleep 600' >/dev/null ||
  fail "sbatch of the second allocation"
wait_until 90 size_seen 3 || fail "the job did not grow to h3: $(show)"
[[ -n "$(workers_on h3)" ]] || fail "world size 3 but no worker on h3: $(show)"
ok "a second allocation of the same name: grown to h3 (srun --jobid), training at size 3 $((SECONDS - t0)) s after sbatch"

# 3.
t0=$SECONDS
on1 30 scontrol update nodename=h2 state=drain reason=hvd-test || fail "scontrol drain h2"
wait_until 90 size_seen 2 'size 3 ' || fail "the job did not shrink when h2 was drained: $(show)"
t1=$SECONDS
wait_until 30 none_on h2 || fail "a worker left on drained h2: $(workers_on h2)"
[[ -n "$(workers_on h3)" ]] || fail "h3's worker gone with h2: $(show)"
ok "h2 drained: training at size 2 on h1 and h3 $((t1 - t0)) s later, nothing of it left on h2"

# 4.
rc=0
wait "$job" || rc=$?
((rc == 0)) || fail "the job exited $rc: $(show)"
grep -aq "done step $STEPS " "$TMP/out" || fail "no exact result: $(show)"
commits_only_grow "$TMP/out"
ok "completed with the exact result, commits only growing, through two resets"
echo "PASS: test_elastic (slurm)"
