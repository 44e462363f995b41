#!/usr/bin/env bash
# horovodrun across hosts: three network namespaces with sshd each (tests/netns/netbed.sh),
# h1 and h2 also on a network h3 cannot reach; horovodrun runs on h1 and launches over ssh.
#   1. the environment contract on every host (and each rank really runs on its host, in the
#      launcher's directory, with the secret in its environment and on no command line), and
#      one supervisor per remote host for all of its ranks
#   2. every blocking collective checked across hosts (collectives_check --quick)
#   3. a rank failing on a remote host ends the job, named
#   4. a host whose sshd is down: a clear error naming it, nothing started; 4b. a rank on h2
#      stopped inside hvd_shutdown after the others exited is named and killed after T, and
#      a rank on h2 that returns before hvd_init fails the others' check-in within 1 s
#   5. horovodrun killed with SIGKILL: no process of the job is left on any host; h2's
#      supervisor killed (the job fails naming h2, nothing left) and stopped (the collectives
#      go on, the job finishes after SIGCONT)
#   6. --mpi across the hosts with Open MPI (collectives checked, ranks placed by mpirun), and
#      a plain mpirun without horovodrun (the ranks meet through PMIx)
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns or sshd).
# shellcheck disable=SC2016  # commands for the ranks are single-quoted on purpose
set -euo pipefail
: "${HVD_BUILD_DIR:?set by ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns_require test_multihost

HVDRUN=$HVD_BUILD_DIR/horovodrun
CHECK=$HVD_BUILD_DIR/tests/mrank/collectives_check
TMP=$(mktemp -d /tmp/hvd-multihost.XXXXXX)
netns_tmp=$TMP
netns_bed_up 3 --isolated 2
export HOME=$TMP/home # the start-up cache lives in $HOME/.horovod
mkdir -p "$HOME"


# 1. environment contract ------------------------------------------------------------------
expected=$("$HVDRUN" --dry-run -np 5 -H h1:2,h2:2,h3:1 true)
# every rank waits for a go file (60 s at most: on a loaded machine the checks below take
# their time), so that the test can look at every host's processes while the job runs
report='echo "rank=$HOROVOD_RANK size=$HOROVOD_SIZE local_rank=$HOROVOD_LOCAL_RANK local_size=$HOROVOD_LOCAL_SIZE cross_rank=$HOROVOD_CROSS_RANK cross_size=$HOROVOD_CROSS_SIZE host=$HOROVOD_HOSTNAME"
  echo "$HOROVOD_RANK on=$HVD_NETBED_HOST pwd=$(pwd) ctl=$HOROVOD_CONTROLLER addr=$HOROVOD_GLOO_RENDEZVOUS_ADDR port=$HOROVOD_GLOO_RENDEZVOUS_PORT" >&2
  printf %s "$_HOROVOD_SECRET_KEY" > "secret.$HOROVOD_RANK"
  for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done'
(cd "$TMP" && on h1 timeout -k 5 120 "$HVDRUN" -np 5 -H h1:2,h2:2,h3:1 sh -c "$report" \
  >"$TMP/out" 2>"$TMP/err") &
job=$!
for _ in $(seq 200); do
  n=$(find "$TMP" -name 'secret.*' | wc -l)
  ((n == 5)) && break
  sleep 0.05
done
((n == 5)) || fail "env: only $n of 5 ranks started: $(cat "$TMP/err")"
secret=$(cat "$TMP/secret.0")
[[ ${#secret} -eq 64 ]] || fail "env: rank 0 has no 64-digit secret: [$secret]"
for r in 1 2 3 4; do
  expect=$(cat "$TMP/secret.$r")
  [[ "$expect" == "$secret" ]] || fail "env: rank $r has another secret than rank 0"
done
# the secret is on no command line of any process of any host while the job runs
for p in $(netns_bed_procs) $(pgrep -f horovodrun || true); do
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "$secret"; then
    fail "env: the secret is on the command line of pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
  fi
done
# one supervisor per remote host (reached through one ssh session), whatever its number of
# ranks: a `horovodrun --internal-exec` (or the NIC discovery's task service, which goes on
# as the supervisor) whose parent is not one (the ranks' middlemen are forks of the
# supervisor and show its command line)
supervisor_pids() { # H: the pids of host hH's supervisors
  local p pp sup='--internal-(exec|task-service)'
  for p in $(ip netns pids "${HVD_NETBED_PREFIX}h$1" 2>/dev/null); do
    grep -qE -- "$sup" "/proc/$p/cmdline" 2>/dev/null || continue
    pp=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) || continue
    grep -qE -- "$sup" "/proc/$pp/cmdline" 2>/dev/null || echo "$p"
  done
  return 0
}
# have_files DIR GLOB N: DIR holds exactly N files named GLOB (ranks announce themselves so)
have_files() { (($(find "$1" -name "$2" | wc -l) == $3)); }
for h in 2 3; do
  n=$(supervisor_pids $h | wc -l)
  ((n == 1)) || fail "env: $n supervisors on h$h, expected one for all of its ranks"
done
touch "$TMP/go"
wait "$job" || fail "env: horovodrun failed: $(cat "$TMP/err")"
got=$(sed -n 's/^\[[0-9]*\]<stdout>://p' "$TMP/out" | sort -t= -k2 -n)
expect_sorted=$(sort -t= -k2 -n <<<"$expected")
[[ "$got" == "$expect_sorted" ]] || fail "env: slots differ from --dry-run:
expected:
$expect_sorted
got:
$got"
err=$(cat "$TMP/err")
for r in 0 1 2 3 4; do
  host=$(sed -n "$((r + 1))p" <<<"$expected" | sed 's/.*host=//')
  line=$(grep "^\[$r\]<stderr>:$r on=" <<<"$err") || fail "env: no report from rank $r: $err"
  # h1's ranks run without ssh, so only the remote ones see the bed's HVD_NETBED_HOST
  [[ "$host" == h1 ]] || [[ "$line" == *"on=$host "* ]] || fail "env: rank $r did not run on $host: $line"
  [[ "$line" == *"pwd=$TMP ctl=gloo addr=10.77.0.1 port="* ]] ||
    fail "env: rank $r: wrong directory or rendezvous: $line"
done
ok "environment contract on h1, h2, h3 (5 ranks), secret on no command line, one supervisor per remote host"

# 2. real collectives across hosts -------------------------------------------------------------
run_on_h1 -np 5 -H h1:2,h2:2,h3:1 "$CHECK" --quick
((RC == 0)) || fail "collectives across hosts: exit $RC: $(tail -n 20 <<<"$ERR")"
summary=$(grep 'checks passed' <<<"$OUT") || fail "collectives: no summary: $OUT"
[[ "$summary" == *" 0 failed on rank 0, 0 on all ranks"* ]] || fail "collectives: $summary"
ok "collectives_check --quick across 3 hosts: ${summary#*:}"

# 3. a remote rank fails -----------------------------------------------------------------------
run_on_h1 -np 5 -H h1:2,h2:2,h3:1 sh -c '[ "$HOROVOD_RANK" = 4 ] && { echo "rank 4 is out" >&2; exit 7; }; sleep 60'
((RC == 7)) || fail "remote failure: exit $RC, expected 7: $ERR"
[[ "$ERR" == *"rank 4 (host h3) was the first to fail: exit code 7"* ]] || fail "remote failure report: $ERR"
[[ "$ERR" == *"rank 4 is out"* ]] || fail "remote failure: the rank's stderr is missing: $ERR"
ok "a rank failing on h3 ends the job with its code and is named"

# 4. a host with sshd down ---------------------------------------------------------------------
kill "$(cat "$HVD_NETBED_DIR/h3/sshd.pid")"
for _ in $(seq 100); do on h3 ss -ltn | grep -q ':22 ' || break; sleep 0.05; done
run_on_h1 --disable-cache -np 5 -H h1:2,h2:2,h3:1 sh -c 'echo started'
((RC == 1)) || fail "ssh down: exit $RC, expected 1"
[[ "$ERR" == *"ssh not successful for host h3:"* && "$ERR" == *"Connection refused"* ]] ||
  fail "ssh down: no per-host ssh error: $ERR"
[[ "$ERR" == *"could not connect to some hosts via ssh: h3 "* ]] || fail "ssh down: summary: $ERR"
[[ "$OUT" != *started* ]] || fail "ssh down: ranks were started: $OUT"
ok "sshd down on h3: named with ssh's error, nothing started"
# with the checks cached from the runs above, the launch itself finds the host down
run_on_h1 -np 5 -H h1:2,h2:2,h3:1 sh -c 'echo started; sleep 30'
((RC == 255)) || fail "ssh down, cached checks: exit $RC, expected ssh's 255: $ERR"
[[ "$ERR" == *"rank 4 (host h3) was the first to fail: exit code 255"* && "$ERR" == *"Connection refused"* ]] ||
  fail "ssh down, cached checks: report: $ERR"
ok "sshd down on h3 with cached checks: the launch fails naming rank 4 on h3 and ssh's error"

# 4b. ranks left behind and ranks leaving early, across hosts (fault matrix rows, issue 32) ----
# (after 4: their host set is another, which would replace the start-up cache 4 relies on)
# rank 2 (on h2) is stopped inside hvd_shutdown while the others exit: h2's supervisor reports
# it stopped, horovodrun names it with h2's pid and kills it T = 3 s later, failing the job
FW=$HVD_BUILD_DIR/tests/fault_worker
mkdir -p "$TMP/fw1"
t0=$SECONDS
run_on_h1 --gloo-timeout-seconds 3 -np 4 -H h1:2,h2:2 "$FW" --dir "$TMP/fw1" --phase shutdown \
  --victim 2 --signal stop
vpid=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$TMP/fw1/victim")
((RC == 137)) || fail "stopped on h2: exit $RC, expected 137: $ERR"
[[ "$ERR" == *"rank 2 (host h2, pid $vpid) is stopped; "* &&
   "$ERR" == *"rank 2 (host h2, pid $vpid) stayed stopped for 3 s"* &&
   "$ERR" == *"rank 2 (host h2) was the first to fail: killed by signal 9"* ]] ||
  fail "stopped on h2: not named and killed: $ERR"
for p in $(netns_bed_procs); do
  [[ $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) != *"$TMP/fw1"* ]] ||
    fail "stopped on h2: pid $p is left: $(tr '\0' ' ' <"/proc/$p/cmdline")"
done
ok "a rank stopped in hvd_shutdown on h2: named with its pid, killed after T; the job ended in $((SECONDS - t0)) s"
# rank 2 (on h2) returns 0 instead of calling hvd_init: the others' check-in fails within 1 s
mkdir -p "$TMP/fw2"
run_on_h1 --gloo-timeout-seconds 30 -np 4 -H h1:2,h2:2 "$FW" --dir "$TMP/fw2" --phase init \
  --victim 2 --signal exit0
((RC != 0)) || fail "exit 0 before hvd_init on h2: the job succeeded: $ERR"
t_exit=$(sed -n 's/.*t_ns=\([0-9]*\).*/\1/p' "$TMP/fw2/victim")
for r in 0 1 3; do
  f=$TMP/fw2/rank.$r
  [[ $(sed -n 's/^status=//p' "$f") == HVD_ERR_PEER_LOST ]] || fail "exit 0 on h2: rank $r: $(cat "$f")"
  msg=$(sed -n 's/^msg=//p' "$f")
  [[ $msg == *"rank 2 (host h2) exited with status 0 before hvd_init"* ]] || fail "exit 0 on h2: rank $r: $msg"
  took=$((($(sed -n 's/^err_ns=//p' "$f") - t_exit) / 1000000))
  ((took < 1000)) || fail "exit 0 on h2: rank $r failed $took ms after rank 2 left"
done
ok "a rank on h2 returning before hvd_init: ranks 0, 1 and 3 failed within $took ms, naming it"

# 5. launcher killed: nothing left on any host ---------------------------------------------------
(cd "$TMP" && on h1 "$HVDRUN" -np 4 -H h1:2,h2:2 sh -c 'touch up.$HOROVOD_RANK; sleep 1000' \
  >"$TMP/out" 2>"$TMP/err") &
wait_until 60 have_files "$TMP" 'up.*' 4 || fail "kill: ranks did not start: $(cat "$TMP/err")"
launcher=$(pgrep -o -f "^$HVDRUN -np 4 -H h1:2,h2:2") || fail "kill: no launcher process"
kill -9 "$launcher"
bed_settles 15 || fail "kill: processes left 15 s after SIGKILL of horovodrun: $(ps -o pid=,args= -p $left)"
ok "horovodrun SIGKILLed: no process left on h1 or h2"

# 5b. h2's supervisor killed, and stopped (rows of the fault matrix) ------------------------------
# killed: its ranks end with it, the job fails naming h2, and nothing is left on any host
# within 10 s
rm -f "$TMP"/up.*
(cd "$TMP" && on h1 "$HVDRUN" -np 4 -H h1:2,h2:2 sh -c 'touch up.$HOROVOD_RANK; sleep 1000' \
  >"$TMP/out" 2>"$TMP/err") &
job=$!
wait_until 60 have_files "$TMP" 'up.*' 4 || fail "supervisor kill: ranks did not start: $(cat "$TMP/err")"
sup=$(supervisor_pids 2)
[[ $(wc -w <<<"$sup") -eq 1 ]] || fail "supervisor kill: supervisors on h2: '$sup'"
kill -9 "$sup"
t0=$SECONDS
RC=0
wait "$job" || RC=$?
ERR=$(cat "$TMP/err")
((RC != 0)) || fail "supervisor kill: the job exited 0"
[[ "$ERR" == *"(host h2) was the first to fail"* ]] || fail "supervisor kill: h2 is not named: $ERR"
bed_settles 10 || fail "supervisor kill: processes left 10 s after the job: $(ps -o pid=,args= -p $left)"
ok "h2's supervisor SIGKILLed: the job ended in $((SECONDS - t0)) s (exit $RC: $(grep -m1 "was the first to fail" <<<"$ERR")), nothing left"
# stopped: the collectives go on (they never pass through it), the job finishes after SIGCONT
W=$HVD_BUILD_DIR/tests/fault_worker
mkdir -p "$TMP/sv"
# (12 s of collectives: time enough for the test to find and stop the supervisor on a loaded
# machine before rank 0 ends the loop)
(cd "$TMP" && on h1 "$HVDRUN" -np 4 -H h1:2,h2:2 "$W" --dir "$TMP/sv" --phase small --signal none \
  --seconds 12 >"$TMP/out" 2>"$TMP/err") &
job=$!
wait_until 60 have_files "$TMP/sv" 'loop.*' 4 || fail "supervisor stop: ranks not in their loop: $(cat "$TMP/err")"
sup=$(supervisor_pids 2)
[[ $(wc -w <<<"$sup") -eq 1 ]] || fail "supervisor stop: supervisors on h2: '$sup'"
progress() { cat "$TMP"/sv/progress.? 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
kill -STOP "$sup"
before=$(progress)
sleep 1.5
after=$(progress)
kill -CONT "$sup"
((after > before)) || fail "supervisor stop: no collective ran while h2's supervisor was stopped ($before -> $after)"
wait "$job" || fail "supervisor stop: the job failed after SIGCONT: $(cat "$TMP/err")"
ok "h2's supervisor SIGSTOPped: collectives went on ($before -> $after iterations in 1.5 s), the job finished after SIGCONT"

# 6. --mpi across the hosts with Open MPI ---------------------------------------------------------
# (ranks take their place from mpirun's environment, meet through horovodrun's store)
run_on_h1 --mpi -np 4 -H h1:2,h2:2 "$CHECK" --quick
((RC == 0)) || fail "--mpi: exit $RC: $(tail -n 20 <<<"$ERR$OUT")"
summary=$(grep 'checks passed' <<<"$OUT") || fail "--mpi: no summary: $OUT"
[[ "$summary" == "[1,0]<stdout>:collectives_check: np=4 quick: "*" 0 failed on rank 0, 0 on all ranks"* ]] ||
  fail "--mpi: $summary"
run_on_h1 --mpi -np 4 -H h1:2,h2:2 "$HVD_BUILD_DIR/examples/hello"
for want in "rank 0 of 4 (local 0 of 2, cross 0 of 2)" "rank 1 of 4 (local 1 of 2, cross 0 of 2)" \
  "rank 2 of 4 (local 0 of 2, cross 1 of 2)" "rank 3 of 4 (local 1 of 2, cross 1 of 2)"; do
  [[ "$OUT" == *"$want"* ]] || fail "--mpi: no rank says [$want]: $OUT"
done
ok "--mpi with Open MPI across h1 and h2: collectives checked, places from mpirun's environment"
# a plain mpirun, without horovodrun: the ranks meet through PMIx (LSAN_OPTIONS goes to the
# ranks on h2 too, for a sanitized build: see the suppression file)
export LSAN_OPTIONS="suppressions=$netns_here/../e2e/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
set +e
(cd "$TMP" && on h1 timeout -k 5 120 mpirun --allow-run-as-root -x LSAN_OPTIONS -np 4 -H h1:2,h2:2 "$CHECK" --quick \
  >"$TMP/out" 2>"$TMP/err")
RC=$?
set -e
((RC == 0)) || fail "plain mpirun: exit $RC: $(tail -n 20 "$TMP/err")"
grep -q "collectives_check: np=4 quick: .* 0 failed on rank 0, 0 on all ranks" "$TMP/out" ||
  fail "plain mpirun: $(cat "$TMP/out")"
ok "plain mpirun across h1 and h2 (no horovodrun): the ranks meet through PMIx, collectives checked"
