#!/usr/bin/env bash
# Strangers on the workers' data-plane ports (garbage, silence) and on their same-host
# listeners (abstract unix sockets: garbage with file descriptors attached, a forged HELLO with
# a memfd, descriptors alone, silence; tests/e2e/unix_stranger.py), with
# tests/mrank/collectives_check's soak mode as the job: the job is unaffected. (Ranks killed
# or stopped mid-collective are the fault matrix's rows, tests/faults.)
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
# each rank's same-host listener: an abstract unix socket whose name comes from the job secret,
# the generation and the rank (96 bits of an HMAC: nothing in it says which port or rank)
unames=()
for ((r = 0; r < np; r++)); do
  pid=$(cat "$dir/pid.$r")
  n=$(ss -Hlxp 2>/dev/null | grep "pid=$pid," | grep -oE "@hvd-data-[^ ]+" | head -1 || true)
  [[ -n $n ]] || fail "rank $r (pid $pid) has no same-host listener: $(ss -Hlxp | grep hvd-data)"
  [[ $n =~ ^@hvd-data-[0-9a-f]{24}$ ]] || fail "rank $r's same-host listener is not named by the secret: $n"
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
