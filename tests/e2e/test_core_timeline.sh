#!/usr/bin/env bash
# The core's timeline (rank 0 writes a Chrome trace), checked with the plain json module by
# tests/mrank/timeline_check.sh:
#  (a) hvd_start_timeline / hvd_stop_timeline at run time: a start replaces the file being
#      written (which stays complete), a stop ends it, a start that cannot create its file
#      fails on rank 0 and keeps the current one; other ranks write nothing;
#  (b) horovodrun --timeline-filename F --timeline-mark-cycles: F is written, with cycle marks;
#  (c) a job SIGKILLed while rank 0 writes its timeline leaves valid JSON behind.
source "$(dirname "$0")/lib.sh"

CHECK="$HVD_BUILD_DIR/tests/mrank/async_check"
TLCHECK="$HVD_SOURCE_DIR/tests/mrank/timeline_check.sh"
[[ -x $CHECK ]] || fail "$CHECK not built"

# no_sanitizer_reports WHAT: the last job's output holds no ASan/LSan/UBSan report (a rank
# that already wrote its result may still fail its leak check at exit).
no_sanitizer_reports() {
  if grep -qE 'Sanitizer|runtime error:' "$TMP/out" "$TMP/err" 2>/dev/null; then
    fail "$1: sanitizer report:
$(grep -hE -A20 'Sanitizer|runtime error:' "$TMP/out" "$TMP/err" | head -60)"
  fi
}

JOB_PID=
cleanup() {
  set +e
  [[ -n $JOB_PID ]] && kill -KILL "$JOB_PID" 2>/dev/null
  for f in "$TMP"/*/pid.*; do
    [[ -f $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

tl() { # timeline_check.sh with the failure as this test's
  bash "$TLCHECK" "$@" || fail "timeline check failed: $*"
}

# ---- (a) start / stop at run time ---------------------------------------------------------------
dir=$TMP/rt
mkdir -p "$dir"
run_hvd -np 2 "$CHECK" timeline --dir "$dir"
no_sanitizer_reports "timeline"
expect_eq "timeline job exit code (stdout: $OUT; stderr: $ERR)" 0 "$RC"
expect_contains "timeline job" "$OUT" "[0]<stdout>:async_check timeline: ok"
# rt1: started with cycle marks; everything of the first phase, nothing of the later ones
tl "$dir/rt1.json" --balanced --ready-ranks 2 --tensor tl.a --tensor tl.b --tensor tl.bc \
  --tensor tl.ag --activity NEGOTIATE_ALLREDUCE --activity ALLREDUCE --activity BROADCAST \
  --activity ALLGATHER --activity NEGOTIATE_BROADCAST --activity CYCLE_START \
  --no-tensor tl2.a --no-tensor after_stop.a --no-tensor tl3.a
# rt2: replaced rt1 without cycle marks; stopped before after_stop
tl "$dir/rt2.json" --balanced --tensor tl2.a --tensor tl2.ag --activity ALLREDUCE \
  --no-activity CYCLE_START --no-tensor tl.a --no-tensor after_stop.a --no-tensor tl3.a
# rt3: kept when a later start failed, closed by hvd_shutdown
tl "$dir/rt3.json" --balanced --tensor tl3.a --tensor tl3.bc --no-tensor after_stop.a \
  --no-tensor tl2.a
leftovers=$(find "$dir" -mindepth 1 ! -name 'rt[123].json')
[[ -z $leftovers ]] || fail "files other than rank 0's timelines were written: $leftovers"

# ---- (b) horovodrun --timeline-filename ----------------------------------------------------------
run_hvd -np 3 --timeline-filename "$TMP/cli.json" --timeline-mark-cycles "$CHECK" loop --steps 3
no_sanitizer_reports "loop"
expect_eq "loop job with --timeline-filename (stdout: $OUT; stderr: $ERR)" 0 "$RC"
[[ -f $TMP/cli.json ]] || fail "--timeline-filename $TMP/cli.json: no file written"
tl "$TMP/cli.json" --balanced --ready-ranks 3 --tensor loop.a --tensor loop.bc \
  --activity NEGOTIATE_ALLREDUCE --activity ALLREDUCE --activity CYCLE_START

# ---- (c) SIGKILL mid-run ---------------------------------------------------------------------------
dir=$TMP/kill
mkdir -p "$dir"
timeout -k 5 120 "$HVDRUN" -np 2 --timeline-filename "$TMP/kill.json" --timeline-mark-cycles \
  "$CHECK" loop --steps 0 --dir "$dir" >"$TMP/kill.out" 2>"$TMP/kill.err" &
JOB_PID=$!
steps() { [[ -f $dir/step ]] && (($(cat "$dir/step") >= 30)); }
wait_until 60 steps || fail "the loop job did not get to 30 steps: $(cat "$TMP/kill.out" "$TMP/kill.err")"
pid0=$(cat "$dir/pid.0")
kill -KILL "$pid0" # rank 0, the timeline's writer, in the middle of its steps
set +e
wait "$JOB_PID"
RC=$?
set -e
JOB_PID=
echo "loop job: rank 0 SIGKILLed after $(cat "$dir/step") steps; horovodrun exit $RC"
((RC != 0)) || fail "the job ended successfully although rank 0 was killed"
tl "$TMP/kill.json" --tensor loop.a --tensor loop.ag --activity ALLREDUCE --activity CYCLE_START \
  --min-events 300
pass
