#!/usr/bin/env bash
# Faults in the middle of collectives, with tests/mrank/collectives_check as the job:
#  (a) a rank SIGKILLed mid-allreduce, and mid-allgather (one host, and hierarchical on two
#      pseudo-hosts): every survivor gets HVD_ERR_PEER_LOST within 1 s;
#  (b) a rank SIGSTOPped: every survivor gets HVD_ERR_TIMEOUT within the timeout + 1 s;
#  (c) strangers on the workers' data-plane ports (garbage, silence) and on their same-host
#      listeners (abstract unix sockets: garbage with file descriptors attached, a forged
#      HELLO with a memfd, descriptors alone, silence; tests/e2e/unix_stranger.py): the job is
#      unaffected.
# horovodrun SIGTERMs every rank once one dies; in the fault modes the ranks ignore SIGTERM, so
# what they report is the library's doing, and they write it to files before anything else.
source "$(dirname "$0")/lib.sh"

CHECK="$HVD_BUILD_DIR/tests/mrank/collectives_check"
[[ -x $CHECK ]] || fail "$CHECK not built"

JOB_PID=
cleanup() {
  set +e
  if [[ -n $JOB_PID ]]; then kill -TERM "$JOB_PID" 2>/dev/null; fi
  for f in "$TMP"/*/pid.* "$TMP"/*/victim; do
    [[ -f $f ]] || continue
    local p
    p=$(sed -n 's/^pid=\([0-9]*\).*/\1/p; s/^\([0-9][0-9]*\)$/\1/p' "$f" | head -1)
    [[ -n $p ]] && kill -CONT "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# field FILE KEY: the value of KEY=... in FILE
field() {
  sed -n "s/^$2=//p" "$1" | head -1
}

all_files() { # dir n victim: every survivor has written its status line
  local r
  for ((r = 0; r < $2; r++)); do
    ((r == $3)) && continue
    [[ -f $1/rank.$r ]] && grep -q '^shutdown_ms=' "$1/rank.$r" || return 1
  done
}

# check_survivors DIR NP VICTIM STATUS MIN_MS MAX_MS: every survivor failed with STATUS
# between MIN_MS and MAX_MS after the victim's fault, failed again at once, and shut down.
check_survivors() {
  local dir=$1 np=$2 victim=$3 want=$4 min_ms=$5 max_ms=$6 r
  [[ -f $dir/victim ]] || fail "$want: the victim never recorded its fault"
  local t_fault
  t_fault=$(sed -n 's/.*t_ns=\([0-9]*\).*/\1/p' "$dir/victim")
  for ((r = 0; r < np; r++)); do
    ((r == victim)) && continue
    local f=$dir/rank.$r
    [[ -f $f ]] || fail "$want: rank $r wrote no result (killed before it saw an error?)
$OUT
$ERR"
    local st err_ns delay_ms msg
    st=$(field "$f" status)
    err_ns=$(field "$f" err_ns)
    msg=$(field "$f" msg)
    [[ $st == "$want" ]] || fail "rank $r: expected $want, got $st: $msg"
    delay_ms=$(((err_ns - t_fault) / 1000000))
    echo "rank $r: $st ${delay_ms} ms after the fault; again: $(field "$f" second) in" \
      "$(field "$f" second_ms) ms; shutdown: $(field "$f" shutdown) in $(field "$f" shutdown_ms) ms;" \
      "message: $msg"
    ((err_ns >= t_fault)) || fail "rank $r: $st ${delay_ms} ms before the fault happened"
    local call_ns
    call_ns=$(field "$f" call_ns)
    ((call_ns <= t_fault)) ||
      echo "note: rank $r started its failing call $(((call_ns - t_fault) / 1000000)) ms after the fault"
    ((delay_ms >= min_ms)) || fail "rank $r: $st after ${delay_ms} ms, expected at least $min_ms"
    ((delay_ms <= max_ms)) || fail "rank $r: $st after ${delay_ms} ms, expected at most $max_ms"
    [[ $msg == *rank* ]] || fail "rank $r: the message does not name a rank: $msg"
    grep -q '^shutdown_ms=' "$f" || fail "rank $r: hvd_shutdown did not return after $st"
    [[ $(field "$f" second) == "$want" ]] ||
      fail "rank $r: the next collective after $want returned $(field "$f" second)"
    local sms
    sms=$(field "$f" shutdown_ms)
    ((${sms%.*} < 3000)) || fail "rank $r: hvd_shutdown took $sms ms after $want"
  done
}

# ---- (a) SIGKILL mid-allreduce -> HVD_ERR_PEER_LOST within 1 s ----------------------------
dir=$TMP/kill
mkdir -p "$dir"
np=4 victim=2
start=$SECONDS
run_hvd -np $np "$CHECK" --mode kill-victim --dir "$dir" --victim $victim --after 3 --count 1048576
echo "kill-victim: horovodrun exit $RC after $((SECONDS - start)) s"
[[ $RC -eq 137 ]] || echo "note: horovodrun exit code $RC (expected 137 for a SIGKILLed rank)"
check_survivors "$dir" $np $victim HVD_ERR_PEER_LOST 0 1000
# the same in the middle of an allgather: in one host's arena, and hierarchical across two
# pseudo-hosts (TCP between them, then each host's arena)
for hosts in "" "-H 127.0.0.1:2,127.0.0.2:2"; do
  dir=$TMP/kill-allgather${hosts:+-hier}
  mkdir -p "$dir"
  # shellcheck disable=SC2086 # hosts is an option and its value, or nothing
  HOROVOD_HIERARCHICAL_ALLGATHER=1 run_hvd -np $np $hosts "$CHECK" --mode kill-victim \
    --dir "$dir" --victim $victim --after 3 --count 1048576 --fault-op allgather
  echo "kill-victim in allgather ${hosts:-(one host)}: horovodrun exit $RC"
  check_survivors "$dir" $np $victim HVD_ERR_PEER_LOST 0 1000
done

# ---- (b) SIGSTOP -> HVD_ERR_TIMEOUT within timeout + 1 s ----------------------------------
dir=$TMP/stop
mkdir -p "$dir"
np=3 victim=1 timeout_s=2
HOROVOD_GLOO_TIMEOUT_SECONDS=$timeout_s timeout -k 5 120 "$HVDRUN" -np $np "$CHECK" \
  --mode stop-victim --dir "$dir" --victim $victim --after 3 --count 262144 \
  >"$TMP/stop.out" 2>"$TMP/stop.err" &
JOB_PID=$!
ok=0
wait_until $((timeout_s + 20)) all_files "$dir" $np $victim && ok=1
# let the stopped rank go on (its peers are gone, so it ends too), then make sure it is gone
vpid=$(sed -n 's/^pid=\([0-9]*\).*/\1/p' "$dir/victim" 2>/dev/null || true)
[[ -n $vpid ]] && kill -CONT "$vpid" 2>/dev/null || true
set +e
wait_until 15 eval '! kill -0 $JOB_PID 2>/dev/null'
if kill -0 "$JOB_PID" 2>/dev/null; then
  kill -TERM "$JOB_PID"
  sleep 1
fi
wait "$JOB_PID"
RC=$?
set -e
JOB_PID=
OUT=$(cat "$TMP/stop.out")
ERR=$(cat "$TMP/stop.err")
echo "stop-victim: horovodrun exit $RC"
((ok)) || fail "the survivors of a stopped rank did not all report within $((timeout_s + 20)) s
$OUT
$ERR"
check_survivors "$dir" $np $victim HVD_ERR_TIMEOUT $((timeout_s * 1000 - 1000)) $((timeout_s * 1000 + 1000))
if [[ -n $vpid ]]; then
  wait_until 10 eval '! kill -0 $vpid 2>/dev/null' || fail "the stopped rank (pid $vpid) is still there"
fi

# ---- (c) strangers on the data-plane ports -------------------------------------------------
dir=$TMP/soak
mkdir -p "$dir"
np=3
timeout -k 5 120 "$HVDRUN" -np $np "$CHECK" --mode soak --dir "$dir" --seconds 4 \
  >"$TMP/soak.out" 2>"$TMP/soak.err" &
JOB_PID=$!
have_pids() {
  local r
  for ((r = 0; r < np; r++)); do [[ -s $dir/pid.$r ]] || return 1; done
}
wait_until 30 have_pids || fail "soak job did not start: $(cat "$TMP/soak.out" "$TMP/soak.err")"
ports=()
for ((r = 0; r < np; r++)); do
  pid=$(cat "$dir/pid.$r")
  # the worker's listening TCP sockets: its data-plane port
  mapfile -t lines < <(ss -Hltnp 2>/dev/null | grep "pid=$pid," || true)
  ((${#lines[@]} > 0)) || fail "rank $r (pid $pid) listens on no TCP port: $(ss -Hltnp)"
  for l in "${lines[@]}"; do
    addr=$(awk '{print $4}' <<<"$l")
    case $addr in
    127.* | 0.0.0.0:* | \*:* | \[::\]:* | \[::1\]:* | \[::ffff:127.*) ;;
    *) fail "rank $r listens on $addr, not on loopback" ;;
    esac
    ports+=("${addr##*:}")
  done
done
echo "data-plane ports: ${ports[*]}"
# each rank's same-host listener: an abstract unix socket named after its TCP address
unames=()
for p in "${ports[@]}"; do
  n=$(grep -oE "@hvd-data-[0-9.]+:$p\$" /proc/net/unix | head -1 || true)
  [[ -n $n ]] || fail "no same-host listener for port $p: $(grep -o '@hvd-data-.*' /proc/net/unix)"
  unames+=("${n#@}")
done
/usr/bin/python3 "$(dirname "$0")/unix_stranger.py" --until-pid "$JOB_PID" "${unames[@]}" \
  >"$TMP/unix_strangers.out" 2>&1 &
unix_pid=$!
# silent strangers: connect, say nothing, stay connected until the job ends
silent=()
for p in "${ports[@]}"; do
  exec {fd}<>"/dev/tcp/127.0.0.1/$p" || fail "cannot connect to port $p"
  silent+=("$fd")
done
# noisy strangers: random bytes, an HTTP request, all-ones (a huge length if read as one)
pester() {
  local p=$1
  timeout 3 bash -c "head -c 65536 /dev/urandom > /dev/tcp/127.0.0.1/$p" 2>/dev/null || true
  timeout 3 bash -c "printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' > /dev/tcp/127.0.0.1/$p" 2>/dev/null || true
  timeout 3 bash -c "head -c 4096 /dev/zero | tr '\\0' '\\377' > /dev/tcp/127.0.0.1/$p" 2>/dev/null || true
  timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p; head -c 16 /dev/urandom >&3; sleep 0.5" 2>/dev/null || true
}
for p in "${ports[@]}"; do pester "$p"; done
# the ranks make their data connections only now, with strangers already in the queue
touch "$dir/go"
(
  while kill -0 "$JOB_PID" 2>/dev/null; do
    for p in "${ports[@]}"; do pester "$p" & done
    wait
    sleep 0.1
  done
) &
pester_pid=$!
set +e
wait "$JOB_PID"
RC=$?
set -e
JOB_PID=
kill "$pester_pid" 2>/dev/null || true
wait "$pester_pid" 2>/dev/null || true
for fd in "${silent[@]}"; do exec {fd}>&-; done
wait "$unix_pid" || fail "unix_stranger.py failed: $(cat "$TMP/unix_strangers.out")"
strangers=$(cat "$TMP/unix_strangers.out")
echo "$strangers"
# every listener had at least a forged HELLO with a memfd and a message of descriptors
[[ $strangers =~ hello=([0-9]+)\ fds=([0-9]+) ]] || fail "unix strangers: $strangers"
((BASH_REMATCH[1] >= ${#unames[@]} && BASH_REMATCH[2] >= ${#unames[@]})) ||
  fail "too few unix strangers got in: $strangers"
OUT=$(cat "$TMP/soak.out")
ERR=$(cat "$TMP/soak.err")
expect_eq "soak job with strangers: exit code (stderr: $ERR)" 0 "$RC"
for ((r = 0; r < np; r++)); do
  expect_contains "rank $r checked results" "$OUT" "[$r]<stdout>:rank $r: soak ok"
done
grep -h "soak ok" "$TMP/soak.out"
pass
