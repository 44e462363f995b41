#!/usr/bin/env bash
# Many ranks on one host, far more than its cores:
#  (a) 1,024 ranks of examples/hello with a 3 s HOROVOD_GLOO_TIMEOUT_SECONDS end cleanly: at
#      500 ranks a core a rank waits seconds for its turn, and a wait that saw nothing move
#      for the timeout asks whether the peer still runs (core/peer_watch.h) instead of
#      declaring it lost (before, with 2 s, some ranks failed with "no progress for 2 s").
#      The timeout also bounds each check-in request to the launcher, so the test runs alone
#      (e2e.cmake);
#  (b) the other side: among 80 ranks (above the host arena's 64, so every wait is the
#      exchange's), a rank SIGSTOPped in the middle of allreduces is still named within a few
#      timeouts, its peers' watch seeing it stopped.
source "$(dirname "$0")/lib.sh"

# ---- (a) starved, not lost ------------------------------------------------------------------
np=1024
timeout -k 5 240 "$HVDRUN" --gloo-timeout-seconds 3 -np $np -H localhost:$np "$HELLO" \
  >"$TMP/out" 2>"$TMP/err" && RC=0 || RC=$?
expect_eq "$np ranks: exit ($(grep -v '^$' "$TMP/err" | head -5))" 0 "$RC"
expect_eq "$np ranks said hello" $np "$(grep -c "hello from rank" "$TMP/out" || true)"
expect_not_contains "$np ranks: stderr" "$(cat "$TMP/err")" "no progress"

# ---- (b) stopped, named ---------------------------------------------------------------------
PERF="$HVD_BUILD_DIR/tools/hvd_allreduce_perf"
[[ -x $PERF ]] || fail "$PERF not built"
np=80
timeout -k 5 120 "$HVDRUN" --gloo-timeout-seconds 2 -np $np -H localhost:$np "$PERF" -b 4K -e 4K \
  -w 1 -n 100000000 -c 0 >"$TMP/out" 2>"$TMP/err" &
launcher=$!
# the table's header comes when the timed loop starts
wait_until 120 grep -q "float32" "$TMP/out" || fail "the job did not start: $(tail -5 "$TMP/err")"
victim=$(rank_pid "^$PERF -b 4K" 1)
[[ -n $victim ]] || fail "rank 1 not found"
stopped_at=$SECONDS
kill -STOP "$victim"
rc=0
wait "$launcher" || rc=$?
took=$((SECONDS - stopped_at))
kill -KILL "$victim" 2>/dev/null || true
((rc != 0)) || fail "the job went on with rank 1 stopped"
expect_contains "a survivor's error" "$(cat "$TMP/err")" "waiting for rank 1 "
# 2 s of timeout, a quarter second's second look, peers that wait for waiting peers learning
# the cause from them, and the launcher's clean-up of 80 ranks
((took <= 30)) || fail "the job failed ${took} s after rank 1 stopped"
echo "rank 1 stopped: the job ended ${took} s later"
wait_until 20 no_procs_with "^$PERF -b 4K" || fail "ranks survived the failed job"
pass
