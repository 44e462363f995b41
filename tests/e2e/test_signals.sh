#!/usr/bin/env bash
# SIGINT/SIGTERM to horovodrun end every rank's process tree, grandchildren included; a
# SIGKILLed horovodrun leaves no orphan either.
source "$(dirname "$0")/lib.sh"

count_at_least() { # marker n
  (($(procs_with "$1" | wc -l) >= $2))
}

start_job() { # marker -> sets PID
  # Each rank: a shell with two background children and one orphaned grandchild, all
  # shells whose command lines carry the marker.
  local inner="sleep 120; : $1"
  "$HVDRUN" -np 3 sh -c "sh -c '$inner' & sh -c '$inner' & (sh -c '$inner' &) ; wait # $1" \
    >"$TMP/job.out" 2>&1 &
  PID=$!
  # horovodrun + 3 ranks x (shell + 3 children)
  wait_until 20 count_at_least "$1" 13 || fail "job $1 did not start: $(cat "$TMP/job.out")"
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
