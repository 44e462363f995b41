#!/usr/bin/env bash
# Elastic mode end to end on loopback: hosts 127.0.0.1, 127.0.0.2, ... are distinct hosts to
# the driver (each runs its workers locally). The worker (tests/e2e/elastic_worker.c) adds the
# same value on every rank at every step and checks at the end that its accumulator equals the
# closed form, so progress lost or counted twice across resets fails the job; rank 0 prints a
# line per commit, whose counter must only grow.
source "$(dirname "$0")/lib.sh"

WORKER="$HVD_BUILD_DIR/tests/elastic_worker"
[[ -x "$WORKER" ]] || fail "$WORKER was not built"
export HOROVOD_GLOO_TIMEOUT_SECONDS=${HOROVOD_GLOO_TIMEOUT_SECONDS:-20}

# The discovery script prints the hosts file, which the scenarios edit while the job runs.
DISCOVER="$TMP/discover.sh"
printf '#!/bin/sh\ncat "%s/hosts"\n' "$TMP" >"$DISCOVER"
chmod +x "$DISCOVER"
set_hosts() { printf '%s\n' "$@" >"$TMP/hosts.new" && mv "$TMP/hosts.new" "$TMP/hosts"; }

JOB=
# start_job ARGS...: horovodrun in the background (output in $TMP/out, $TMP/err).
start_job() {
  : >"$TMP/out"
  : >"$TMP/err"
  timeout -k 5 150 "$HVDRUN" "$@" >"$TMP/out" 2>"$TMP/err" &
  JOB=$!
}

# finish_job: wait for it; sets RC, OUT, ERR.
finish_job() {
  set +e
  wait "$JOB"
  RC=$?
  set -e
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
}

# Lines "[r]<stdout>:pid <rank> <host> <pid>" name the workers of every world.
pid_of() { # pid_of RANK HOST: the newest pid printed for that rank on that host
  grep -a "<stdout>:pid $1 $2 " "$TMP/out" | tail -1 | awk '{print $4}'
}
have_pid() { [[ -n "$(pid_of "$1" "$2")" ]]; }
more_pids() { # RANK HOST N: more than N workers were that rank on that host
  (($(grep -ac "<stdout>:pid $1 $2 " "$TMP/out") > $3))
}
commits() { grep -ao 'commit [0-9]*' "$TMP/out" | awk '{print $2}'; }
last_commit() { commits | tail -1; }
commit_at_least() { local c; c=$(last_commit); [[ -n "$c" && "$c" -ge "$1" ]]; }
saw() { grep -aq -- "$1" "$TMP/out" "$TMP/err"; }

# The job completed with the exact result, and the commit counter only grew.
expect_completed() { # WHAT STEPS
  finish_job
  [[ $RC -eq 0 ]] || fail "$1: exit $RC
$OUT
$ERR"
  expect_contains "$1: exact result" "$OUT" "done step $2 "
  local prev=-1 c
  for c in $(commits); do
    ((c > prev)) || fail "$1: commit counter went from $prev to $c:
$OUT"
    prev=$c
  done
  ((prev > 0)) || fail "$1: no commits printed:
$OUT"
}

ARGS=(--commit-every 2 --sleep-ms 40 --print-pid)

# 1. A host added mid-training: a worker starts on it, joins, and training goes on.
scenario_add_host() {
  set_hosts 127.0.0.1:2
  start_job --host-discovery-script "$DISCOVER" -np 2 --min-np 2 --max-np 3 "$WORKER" \
    --steps 120 "${ARGS[@]}"
  wait_until 30 commit_at_least 4 || fail "add host: no progress: $(cat "$TMP/out" "$TMP/err")"
  set_hosts 127.0.0.1:2 127.0.0.2:1
  wait_until 30 saw 'size 3 ' || fail "add host: the new worker never joined: $(cat "$TMP/err")"
  expect_completed "add host" 120
  expect_contains "add host: the new worker ran" "$OUT" "pid 2 127.0.0.2 "
}

# 2. A host removed: its worker leaves, the others go on without a failure.
scenario_remove_host() {
  set_hosts 127.0.0.1:2 127.0.0.2:1
  start_job --host-discovery-script "$DISCOVER" -np 3 --min-np 2 "$WORKER" --steps 120 \
    "${ARGS[@]}"
  wait_until 30 commit_at_least 4 || fail "remove host: no progress: $(cat "$TMP/err")"
  set_hosts 127.0.0.1:2
  wait_until 30 saw 'size 2 ' || fail "remove host: the world did not shrink: $(cat "$TMP/err")"
  expect_completed "remove host" 120
  expect_not_contains "remove host: no failure" "$ERR" "failed:"
}

# 3/4. SIGKILL of a worker (rank VICTIM on HOST): the job resumes from the last commit on the
# other hosts; nothing committed is lost.
scenario_kill() { # NAME RANK HOST
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1
  start_job --host-discovery-script "$DISCOVER" -np 3 --min-np 2 "$WORKER" --steps 120 \
    "${ARGS[@]}"
  wait_until 30 commit_at_least 6 || fail "$1: no progress: $(cat "$TMP/err")"
  local pid
  pid=$(pid_of "$2" "$3")
  [[ -n "$pid" ]] || fail "$1: no pid line for rank $2 on $3"
  kill -KILL "$pid"
  expect_completed "$1" 120
  expect_contains "$1: the failure is named" "$ERR" "host $3, local rank 0) failed: killed by signal 9"
  expect_contains "$1: its host is blacklisted" "$ERR" "blacklisting host $3"
  expect_contains "$1: the job went on with two" "$OUT" "size 2 "
}

# Fixed hosts (-H) with --min-np are elastic too: losing one host's worker is survived.
scenario_fixed_hosts() {
  start_job -np 2 --min-np 1 -H 127.0.0.1:1,127.0.0.2:1 "$WORKER" --steps 100 "${ARGS[@]}"
  wait_until 30 commit_at_least 4 || fail "fixed hosts: no progress: $(cat "$TMP/err")"
  kill -KILL "$(pid_of 1 127.0.0.2)"
  expect_completed "fixed hosts" 100
  expect_contains "fixed hosts: went on alone" "$OUT" "size 1 "
}

# 5. SIGSTOP of a worker: no heartbeat within the timeout, so the driver kills it and the
# others go on (within the timeout, not after a hang).
scenario_stop() {
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1
  HOROVOD_GLOO_TIMEOUT_SECONDS=3 start_job --host-discovery-script "$DISCOVER" -np 3 \
    --min-np 2 "$WORKER" --steps 120 "${ARGS[@]}"
  wait_until 30 commit_at_least 6 || fail "stop: no progress: $(cat "$TMP/err")"
  local pid
  pid=$(pid_of 1 127.0.0.2)
  kill -STOP "$pid"
  local t0=$SECONDS
  wait_until 30 saw 'sent no heartbeat for 3 s' || fail "stop: silence not detected: $(cat "$TMP/err")"
  ((SECONDS - t0 <= 10)) || fail "stop: detected only after $((SECONDS - t0)) s"
  expect_completed "stop" 120
  expect_contains "stop: host blacklisted" "$ERR" "blacklisting host 127.0.0.2"
}

# A worker alive but never leaving a failed round (stuck in its own code, heartbeats going on):
# named while the driver waits, ended after --elastic-timeout, and the others go on.
scenario_straggler() {
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1
  start_job --host-discovery-script "$DISCOVER" -np 3 --min-np 1 --elastic-timeout 7 "$WORKER" \
    --steps 120 "${ARGS[@]}" --hang-on-failure 127.0.0.3
  wait_until 30 commit_at_least 4 || fail "straggler: no progress: $(cat "$TMP/err")"
  kill -KILL "$(pid_of 1 127.0.0.2)"
  expect_completed "straggler" 120
  expect_contains "straggler: it hung" "$ERR" "hanging as asked"
  expect_contains "straggler: ended" "$ERR" \
    "host 127.0.0.3, local rank 0) did not leave round 0 within 7 s (--elastic-timeout)"
  expect_contains "straggler: named while waited for" "$ERR" "still waiting for 1 worker to leave it: 127.0.0.3:0"
  expect_contains "straggler: the job went on alone" "$OUT" "size 1 "
}

# Rows of the fault matrix (tests/faults/faults.cmake runs each alone; not in the default
# list). The driver is horovodrun itself: $JOB is the timeout wrapping it.
driver_pid() { pgrep -P "$JOB" -x horovodrun; }
job_procs() { pgrep -f -- "$TMP/never" || true; } # every worker carries --stop-file $TMP/never

# The driver stopped mid-training: the workers train on meanwhile (their output waits in the
# pipes), and the job completes exactly after SIGCONT.
scenario_driver_stop() {
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1
  start_job --host-discovery-script "$DISCOVER" -np 3 --min-np 2 "$WORKER" --steps 200 \
    "${ARGS[@]}" --stop-file "$TMP/never"
  wait_until 30 commit_at_least 4 || fail "driver stop: no progress: $(cat "$TMP/err")"
  local driver before
  driver=$(driver_pid)
  [[ -n $driver ]] || fail "driver stop: no horovodrun under $JOB"
  before=$(last_commit)
  kill -STOP "$driver"
  sleep 3
  kill -CONT "$driver"
  wait_until 5 commit_at_least $((before + 15)) ||
    fail "driver stop: the workers did not train while the driver was stopped (commit $before, then $(last_commit))"
  echo "ok   commits $before -> $(last_commit) across the driver's 3 s stop"
  expect_completed "driver stop" 200
  expect_not_contains "driver stop: no failure" "$ERR" "failed:"
}

# The driver killed: every worker is gone within 10 s (each middleman sees its launcher go).
scenario_driver_kill() {
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1
  start_job --host-discovery-script "$DISCOVER" -np 3 --min-np 2 "$WORKER" --steps 100000 \
    "${ARGS[@]}" --stop-file "$TMP/never"
  wait_until 30 commit_at_least 4 || fail "driver kill: no progress: $(cat "$TMP/err")"
  [[ -n "$(job_procs)" ]] || fail "driver kill: no worker found by its --stop-file"
  kill -KILL "$(driver_pid)"
  local t0=$SECONDS
  wait_until 10 eval '[[ -z "$(job_procs)" ]]' ||
    fail "driver kill: workers left 10 s after the driver was killed: $(pgrep -af -- "$TMP/never")"
  echo "ok   every worker gone $((SECONDS - t0)) s after the driver was killed"
  finish_job
}

# A second worker killed while the world re-forms after the first one's death: the job
# still completes exactly on the remaining hosts, and both failures are named.
scenario_kill_in_reinit() {
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1 127.0.0.4:1
  start_job --host-discovery-script "$DISCOVER" -np 4 --min-np 2 "$WORKER" --steps 120 \
    "${ARGS[@]}"
  wait_until 30 commit_at_least 6 || fail "kill in reinit: no progress: $(cat "$TMP/err")"
  local second
  second=$(pid_of 2 127.0.0.3)
  kill -KILL "$(pid_of 1 127.0.0.2)"
  wait_until 10 saw "host 127.0.0.2, local rank 0) failed: killed by signal 9" ||
    fail "kill in reinit: the first failure was not seen: $(cat "$TMP/err")"
  kill -KILL "$second"
  expect_completed "kill in reinit" 120
  expect_contains "kill in reinit: the second failure is named" "$ERR" \
    "host 127.0.0.3, local rank 0) failed: killed by signal 9"
  expect_contains "kill in reinit: the job went on with two" "$OUT" "size 2 "
}

# A worker that does not reach hvd_init within --start-timeout (here the one on 127.0.0.2
# sleeps first): the driver names it, kills it, blacklists its host, and the job goes on.
scenario_slow_start() {
  set_hosts 127.0.0.1:1 127.0.0.2:1
  # (the sleeper is named by its argv[0], for the check that nothing is left)
  start_job --host-discovery-script "$DISCOVER" -np 2 --min-np 1 --start-timeout 3 bash -c \
    '[[ $HOROVOD_HOSTNAME == 127.0.0.2 ]] && exec -a "$0/slow-sleeper" sleep 100; exec "$@"' \
    "$TMP" "$WORKER" --steps 60 "${ARGS[@]}"
  expect_completed "slow start" 60
  expect_contains "slow start: named and killed" "$ERR" \
    "host 127.0.0.2, local rank 0) did not call hvd_init within 3 s of its start (--start-timeout); killing it"
  expect_contains "slow start: its host is blacklisted" "$ERR" "blacklisting host 127.0.0.2"
  expect_contains "slow start: the job ran alone" "$OUT" "size 1 "
  no_procs_with "$TMP/slow-sleeper" || fail "slow start: the slow worker was left running"
}

# 6. Every worker fails: the job stops with an error naming the first failure.
scenario_all_fail() {
  set_hosts 127.0.0.1:1 127.0.0.2:1
  run_hvd --host-discovery-script "$DISCOVER" -np 2 --min-np 1 sh -c 'echo boom >&2; exit 7'
  [[ $RC -eq 7 ]] || fail "all fail: exit $RC (want 7): $ERR"
  expect_contains "all fail: message" "$ERR" "every worker failed"
  expect_contains "all fail: report" "$ERR" "was the first to fail: exit code 7"
  expect_contains "all fail: stderr tail" "$ERR" "boom"
}

# 7. The reset limit: the second reset stops the job with the reference's message.
scenario_reset_limit() {
  set_hosts 127.0.0.1:1 127.0.0.2:1 127.0.0.3:1
  start_job --host-discovery-script "$DISCOVER" -np 3 --min-np 1 --reset-limit 1 "$WORKER" \
    --steps 400 "${ARGS[@]}"
  wait_until 30 commit_at_least 4 || fail "reset limit: no progress: $(cat "$TMP/err")"
  kill -KILL "$(pid_of 2 127.0.0.3)"
  wait_until 30 saw 'size 2 ' || fail "reset limit: no first reset: $(cat "$TMP/err")"
  wait_until 30 have_pid 1 127.0.0.2 || fail "reset limit: no pid line"
  kill -KILL "$(pid_of 1 127.0.0.2)"
  finish_job
  [[ $RC -ne 0 ]] || fail "reset limit: the job succeeded"
  expect_contains "reset limit: message" "$ERR" \
    "Horovod was shutdown because number of resets during elastic job exceeded limit: 1"
}

# 8. A blacklisted host comes back when its cooldown ends (range 1 2: every period is 2 s).
scenario_cooldown() {
  set_hosts 127.0.0.1:1 127.0.0.2:1
  start_job --host-discovery-script "$DISCOVER" -np 2 --min-np 1 --blacklist-cooldown-range 1 2 \
    "$WORKER" --steps 200 "${ARGS[@]}"
  wait_until 30 commit_at_least 4 || fail "cooldown: no progress: $(cat "$TMP/err")"
  kill -KILL "$(pid_of 1 127.0.0.2)"
  wait_until 30 saw 'blacklisting host 127.0.0.2 for 2 s' || fail "cooldown: $(cat "$TMP/err")"
  wait_until 30 saw 'size 1 ' || fail "cooldown: no world of one: $(cat "$TMP/err")"
  # back after 2 s: a new worker on it, a world of two again
  wait_until 30 more_pids 1 127.0.0.2 1 ||
    fail "cooldown: the host never came back: $(cat "$TMP/err")"
  expect_completed "cooldown" 200
}

# 9. Malformed discovery output: at start the job fails naming the line; later it is a
# warning and the last good host set is kept.
scenario_malformed() {
  set_hosts 127.0.0.1:1 'bad:host:x'
  run_hvd --host-discovery-script "$DISCOVER" -np 1 --min-np 1 true
  [[ $RC -ne 0 ]] || fail "malformed: the job started"
  expect_contains "malformed: line named" "$ERR" "line 2"
  set_hosts 127.0.0.1:1 127.0.0.2:1
  start_job --host-discovery-script "$DISCOVER" -np 2 --min-np 1 "$WORKER" --steps 80 \
    "${ARGS[@]}"
  wait_until 30 commit_at_least 2 || fail "malformed: no progress: $(cat "$TMP/err")"
  set_hosts 127.0.0.1:1 'bad:host:x'
  wait_until 30 saw 'line 2' || fail "malformed: no warning: $(cat "$TMP/err")"
  expect_completed "malformed later" 80
  expect_not_contains "malformed later: nothing removed" "$OUT" "size 1 "
}

# 10. A discovery script that hangs: killed at its deadline; at start that fails the job.
scenario_hang() {
  printf '#!/bin/sh\nsleep 1000\n' >"$TMP/hang.sh"
  chmod +x "$TMP/hang.sh"
  local t0=$SECONDS
  run_hvd --host-discovery-script "$TMP/hang.sh" -np 1 --min-np 1 true
  [[ $RC -ne 0 ]] || fail "hang: the job started"
  expect_contains "hang: message" "$ERR" "hang.sh"
  ((SECONDS - t0 < 30)) || fail "hang: took $((SECONDS - t0)) s"
  no_procs_with "$TMP/hang.sh" || fail "hang: the script was left running"
}

only=${1:-}
for s in add_host remove_host kill_worker kill_rank0 fixed_hosts stop straggler slow_start all_fail \
  reset_limit cooldown malformed hang driver_stop driver_kill kill_in_reinit; do
  # the fault matrix's rows run only when asked for by name
  [[ -z "$only" && $s != driver_* && $s != kill_in_reinit ]] || [[ "$only" == "$s" ]] || continue
  echo "--- $s"
  case $s in
  kill_worker) scenario_kill "kill worker" 1 127.0.0.2 ;;
  kill_rank0) scenario_kill "kill rank 0" 0 127.0.0.1 ;;
  *) "scenario_$s" ;;
  esac
done
pass
