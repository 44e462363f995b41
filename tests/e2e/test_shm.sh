#!/usr/bin/env bash
# Same-host ranks exchange through shared memory (memfd rings handed over an authenticated
# abstract unix socket), and HVD_SHM=0 sends everything over loopback TCP:
#  (a) the conformance check passes both ways (the first with HVD_CMA=1; large reducescatters,
#      which take the arena from 8 MiB, checked too), and the debug log shows which path
#      every connection took; with HVD_CMA=1 at np 2 the allreduces from 1 MiB read each
#      other's buffers in place (the log says so) and the check passes;
#  (b) after every process of a job is SIGKILLed mid-run, nothing is left behind: no hvd
#      entry in /dev/shm and none of its shared objects' names in /tmp (the memory is a memfd
#      and the sockets are abstract, so there is nothing to leave);
#  (c) a rank SIGSTOPped in the middle of allreduces in the host arena: the others fail
#      with HVD_ERR_TIMEOUT naming it after HOROVOD_GLOO_TIMEOUT_SECONDS, and nothing of the
#      job is left (a killed rank is e2e.core_faults' case (a), which runs in the arena too);
#  (d) hierarchical collectives on pseudo-hosts (host names 127.0.0.x on this machine: an
#      arena each, TCP between them): HOROVOD_HIERARCHICAL_ALLREDUCE/_ALLGATHER=1 on three
#      hosts of two ranks, left to hvd (auto) on two, and 0: every rank says how its allreduce
#      and allgather go, and the conformance check passes.
source "$(dirname "$0")/lib.sh"

CHECK="$HVD_BUILD_DIR/tests/mrank/collectives_check"
[[ -x $CHECK ]] || fail "$CHECK not built"

# ---- (a) both paths ------------------------------------------------------------------------
# with HVD_CMA=1 and no more ranks than cores, allreduces from 1 MiB read the other ranks'
# buffers in place (shm_allreduce.c): two ranks, every allreduce of the check and its 1.2 MB
# ones in and out of place, and a prescale that differs between ranks refused, not misread
if (($(nproc) >= 2)); then
  HVD_CMA=1 HOROVOD_LOG_LEVEL=debug run_hvd -np 2 "$CHECK" --quick --colls allreduce,ex,mismatch
  expect_eq "allreduces reading each other's buffers: exit" 0 "$RC"
  expect_contains "allreduces reading each other's buffers: checked" "$(cat "$TMP/out")" \
    " 0 failed on rank 0, 0 on all ranks"
  if (($(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0) == 0)); then
    expect_eq "ranks whose allreduce read the others' buffers" 2 \
      "$(grep -c "reading the host's ranks' buffers in place" "$TMP/out" || true)"
  fi
fi
# (with HVD_CMA=1: large allgather blocks read from each other's memory where the system
# allows it, which it does for processes of one user without Yama's ptrace restrictions)
HVD_CMA=1 HOROVOD_LOG_LEVEL=debug run_hvd -np 3 "$CHECK" --quick
expect_eq "shm run exit" 0 "$RC"
cma=$(grep -c "large blocks between this host's ranks: read from each other's memory" "$TMP/out" || true)
scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)
if ((scope == 0)); then
  expect_eq "ranks reading large blocks with process_vm_readv" 3 "$cma"
else
  expect_eq "ranks that logged how large blocks move" 3 "$(grep -c "large blocks between this host's ranks" "$TMP/out" || true)"
fi
# (the library logs to the rank's stdout below warning level)
links() { cat "$TMP/out" "$TMP/err" | grep -E "connected to rank|accepted data connection" || true; }
shm_links=$(links | grep -c "through shared memory" || true)
# 3 ranks talk pairwise: every pair connects once, logged by both ends
[[ $shm_links -ge 6 ]] || fail "expected every connection through shared memory, got $shm_links:
$(links)"
if links | grep -vq "shared memory"; then
  fail "a same-host connection used TCP: $(links)"
fi

# reducescatter takes the arena from 8 MiB, above the conformance check's usual counts: each
# dtype at an odd count just past it (uneven thirds; one count for all tripled the bytes)
for dc in float16:4194319 float32:2097169 int64:1048583; do
  run_hvd -np 3 "$CHECK" --colls reducescatter --counts "${dc#*:}" --dtypes "${dc%%:*}" \
    --ops sum,average
  expect_eq "large reducescatter in the arena, ${dc%%:*}: exit ($(grep -h "FAIL\|checks" "$TMP/out" | head -3))" 0 "$RC"
done

HVD_SHM=0 HOROVOD_LOG_LEVEL=debug run_hvd -np 3 "$CHECK" --quick
expect_eq "tcp run exit" 0 "$RC"
expect_not_contains "HVD_SHM=0 log" "$(links)" "through shared memory"
expect_contains "HVD_SHM=0 log" "$(links)" "connected to rank"

# ---- (b) nothing left after SIGKILL --------------------------------------------------------
# In /dev/shm anything of hvd's; in /tmp only the names of what hvd shares (its memfds'
# hvd-rings and hvd-arena, its sockets' hvd-data-...): other tests, running beside this one,
# make and remove temporary dirs called hvd-<test>.XXXXXX there (a count of those once failed
# this check).
hvd_files() {
  {
    find /dev/shm -maxdepth 1 -iname '*hvd*'
    find /tmp -maxdepth 1 \( -name '*hvd-rings*' -o -name '*hvd-arena*' -o -name '*hvd-data*' \)
  } 2>/dev/null | sort
}
before=$(hvd_files)
timeout -k 5 60 "$HVDRUN" -np 3 "$CHECK" --big >"$TMP/out" 2>"$TMP/err" &
launcher=$!
wait_until 20 bash -c "[ \$(pgrep -f -c '^$CHECK --big') -ge 3 ] && grep -q '@hvd-data-' /proc/net/unix" ||
  fail "the job did not start with same-host sockets: $(cat "$TMP/err")"
pkill -KILL -f "^$CHECK --big" || true
kill -KILL "$launcher" 2>/dev/null || true
wait "$launcher" 2>/dev/null || true
wait_until 10 no_procs_with "^$CHECK --big" || fail "ranks survived SIGKILL"
expect_eq "hvd files in /dev/shm and /tmp after SIGKILL" "$before" "$(hvd_files)"

# ---- (c) a stopped rank ---------------------------------------------------------------------
PERF="$HVD_BUILD_DIR/tools/hvd_allreduce_perf"
[[ -x $PERF ]] || fail "$PERF not built"
HOROVOD_LOG_LEVEL=debug timeout -k 5 60 "$HVDRUN" --gloo-timeout-seconds 2 -np 3 "$PERF" -b 4K -e 4K \
  -w 1 -n 100000000 -c 0 >"$TMP/out" 2>"$TMP/err" &
launcher=$!
# the debug log says when the arena is agreed; the timed loop starts right after
wait_until 20 grep -q "shared-memory arena for collectives" "$TMP/out" ||
  fail "no arena: $(cat "$TMP/out" "$TMP/err")"
sleep 1
victim=$(rank_pid "^$PERF -b 4K" 1)
[[ -n $victim ]] || fail "rank 1 not found"
stopped_at=$SECONDS
kill -STOP $victim
rc=0
wait "$launcher" || rc=$?
took=$((SECONDS - stopped_at))
kill -KILL $victim 2>/dev/null || true
((rc != 0)) || fail "the job went on with rank 1 stopped"
expect_contains "a survivor's error" "$(cat "$TMP/err")" \
  "no progress for 2 s (HOROVOD_GLOO_TIMEOUT_SECONDS) waiting for rank 1 "
# 2 s of timeout, the 50 ms sleeps' granularity and the launcher's clean-up (ASan: slower)
((took <= 10)) || fail "the survivors failed ${took} s after rank 1 stopped"
wait_until 10 no_procs_with "^$PERF -b 4K" || fail "ranks survived the failed job"

# ---- (d) hierarchical allreduce and allgather ------------------------------------------------
# forced on, three hosts of two ranks
HOROVOD_HIERARCHICAL_ALLREDUCE=1 HOROVOD_HIERARCHICAL_ALLGATHER=1 HOROVOD_LOG_LEVEL=debug \
  run_hvd -np 6 -H 127.0.0.1:2,127.0.0.2:2,127.0.0.3:2 "$CHECK" --quick
# expect_hier_run WHAT NP HOW: the run passed the conformance check, and NP ranks logged that
# their allreduce and allgather go HOW (the log's words after "<collective> hierarchical")
expect_hier_run() {
  local what=$1 np=$2 how=$3 coll
  expect_eq "$what run exit ($(tail -n 5 "$TMP/err"))" 0 "$RC"
  for coll in allreduce allgather; do
    expect_eq "ranks with a $what $coll" "$np" "$(grep -c "$coll hierarchical$how" "$TMP/out" || true)"
  done
  grep -q "0 failed on rank 0, 0 on all ranks" "$TMP/out" || fail "$what: $(grep checks "$TMP/out")"
}
expect_hier_run hierarchical 6 ": in each host's shared memory"
# left to hvd (the default): hierarchical from a size on, flat below (--quick's sizes span the
# allreduce's 256 KiB on two hosts, not the allgather's 32 MiB)
HOROVOD_LOG_LEVEL=debug run_hvd -np 4 -H 127.0.0.1:2,127.0.0.2:2 "$CHECK" --quick
expect_hier_run "automatic hierarchical" 4 " from [0-9]* KiB (auto)"
# 0: flat, whatever the size
HOROVOD_HIERARCHICAL_ALLREDUCE=0 HOROVOD_HIERARCHICAL_ALLGATHER=0 HOROVOD_LOG_LEVEL=debug \
  run_hvd -np 4 -H 127.0.0.1:2,127.0.0.2:2 "$HVD_BUILD_DIR/examples/hello"
expect_eq "flat run exit" 0 "$RC"
expect_not_contains "flat run log" "$(cat "$TMP/out")" "hierarchical"

pass
