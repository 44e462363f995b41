#!/usr/bin/env bash
# SIGINT/SIGTERM to horovodrun end every rank's process tree, grandchildren included; a
# SIGKILLed horovodrun leaves no orphan either.
source "$(dirname "$0")/lib.sh"

start_job() { # marker -> sets PID
  "$HVDRUN" -np 3 sh -c "sleep 120 & sleep 120 & (sleep 120 &) ; wait # $1" >"$TMP/job.out" 2>&1 &
  PID=$!
  # 3 ranks x (shell + 3 sleeps)
  wait_until 20 test "$(procs_with "$1" | wc -l)" -ge 9 || fail "job $1 did not start: $(cat "$TMP/job.out")"
}

for sig in INT TERM; do
  mark="hvd-e2e-sig$sig-$$"
  start_job "$mark"
  kill -"$sig" "$PID"
  set +e
  wait "$PID"
  rc=$?
  set -e
  if [[ $sig == INT ]]; then expect_eq "exit code after SIGINT" 130 "$rc"; fi
  if [[ $sig == TERM ]]; then expect_eq "exit code after SIGTERM" 143 "$rc"; fi
  wait_until 10 no_procs_with "$mark" || fail "SIG$sig left processes: $(procs_with "$mark")"
done

mark="hvd-e2e-sigKILL-$$"
start_job "$mark"
kill -KILL "$PID"
wait "$PID" 2>/dev/null || true
wait_until 15 no_procs_with "$mark" || fail "SIGKILL of horovodrun left orphans: $(procs_with "$mark")"
pass
