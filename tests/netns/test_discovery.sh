#!/usr/bin/env bash
# NIC discovery across hosts: three network namespaces, h1 and h2 also on 10.78.0.0/24 (eth1),
# which h3 cannot reach. horovodrun runs on h1.
#   1. h1 + h2: both networks are common (eth0 eth1); the ranks get HOROVOD_GLOO_IFACE=eth0
#   2. h1 + h2 + h3: eth1 is rejected (h3 has none), eth0 chosen
#   3. --network-interface 10.78.0.0/24 (a network, not a name) on h1 + h2: used, job runs
#   4. the same network with h3: fails with the per-host reachability matrix naming h3
#   5. strangers (garbage, a forged request with a wrong MAC, a recorded REGISTER replayed)
#      sent to the driver during discovery from h3: rejected and logged with their address,
#      the job unaffected
#   5b. h3's task service SIGKILLed (retried, the job runs) and SIGSTOPped (the launch fails at
#      --start-timeout naming h3) during discovery; nothing is left on any host
#   5c. 1,000 idle connections and 10,000 bad requests at the driver, 10,000 at h2's task
#      service (2,000 each under ASan), during discovery: nothing served, short log, < 1 MiB
#      memory growth, job runs
#   6. the cache: a second identical launch skips the ssh check and discovery
#   7. --check-network: every pair of hosts on each interface, a matrix with each failure's
#      cause (h3, without eth1, has no route to the others'); with h2's eth1 dropped and h3's
#      task port filtered for h1 and refused to h2, each failure named with its cause, and
#      the check fails
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns or sshd).
# shellcheck disable=SC2016  # commands for the ranks are single-quoted on purpose
set -euo pipefail
: "${HVD_BUILD_DIR:?set by ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns_require test_discovery

HVDRUN=$HVD_BUILD_DIR/horovodrun
TMP=$(mktemp -d /tmp/hvd-discovery.XXXXXX)
netns_tmp=$TMP
netns_bed_up 3 --isolated 2
export HOME=$TMP/home # the start-up cache lives in $HOME/.horovod
mkdir -p "$HOME"

report='echo "$HOROVOD_RANK iface=$HOROVOD_GLOO_IFACE nccl=$NCCL_SOCKET_IFNAME addr=$HOROVOD_GLOO_RENDEZVOUS_ADDR"'

# 1. two hosts on both networks --------------------------------------------------------------
run_on_h1 --disable-cache --verbose -np 2 -H h1:1,h2:1 sh -c "$report"
((RC == 0)) || fail "h1+h2: exit $RC: $ERR"
[[ "$OUT" == *"Common interface found: eth0 eth1"* ]] || fail "h1+h2: common set: $OUT"
for r in 0 1; do
  [[ "$OUT" == *"[$r]<stdout>:$r iface=eth0 nccl=eth0,eth1 addr=10.77.0.1"* ]] || fail "h1+h2: rank $r env: $OUT"
done
ok "h1+h2: eth0 and eth1 common, HOROVOD_GLOO_IFACE=eth0, NCCL_SOCKET_IFNAME=eth0,eth1"

# 2. h3 has no eth1: only eth0 is common, and a job really runs on it --------------------------
run_on_h1 --disable-cache --verbose -np 3 -H h1:1,h2:1,h3:1 sh -c "$report"
((RC == 0)) || fail "h1+h2+h3: exit $RC: $ERR"
[[ "$OUT" == *"Common interface found: eth0"$'\n'* ]] || fail "h1+h2+h3: common set: $OUT"
[[ "$OUT" == *"[2]<stdout>:2 iface=eth0 nccl=eth0 addr=10.77.0.1"* ]] || fail "h1+h2+h3: env: $OUT"
run_on_h1 --disable-cache -np 3 -H h1:1,h2:1,h3:1 "$HVD_BUILD_DIR/examples/hello"
((RC == 0)) && [[ "$OUT" == *"rank 2 of 3"* ]] || fail "h1+h2+h3: hello: $RC $OUT $ERR"
ok "h1+h2+h3: the isolated eth1 rejected, eth0 chosen, ranks meet over it"

# 3. interfaces named by network ----------------------------------------------------------------
run_on_h1 --disable-cache --network-interface 10.78.0.0/24 -np 2 -H h1:1,h2:1 sh -c \
  "$report"'; ip -4 -o addr show | grep -c "inet 10.78.0."'
((RC == 0)) || fail "cidr: exit $RC: $ERR"
[[ "$OUT" == *"iface=10.78.0.0/24 nccl=eth1 addr=10.78.0.1"* ]] || fail "cidr: env: $OUT"
run_on_h1 --disable-cache --network-interface 10.78.0.0/24 -np 2 -H h1:1,h2:1 "$HVD_BUILD_DIR/examples/hello"
((RC == 0)) || fail "cidr: hello: exit $RC: $ERR"
ok "--network-interface 10.78.0.0/24: the store on 10.78.0.1, ranks find their own interface"

# 4. the same network cannot reach h3: the matrix says why --------------------------------------
run_on_h1 --disable-cache --network-interface 10.78.0.0/24 -np 3 -H h1:1,h2:1,h3:1 sh -c 'echo started'
((RC == 1)) || fail "cidr with h3: exit $RC, expected 1: $ERR"
[[ "$ERR" == *"h2 (index 1) -> h3 (index 2): h3 has no address that passes the interface filter"* ]] ||
  fail "cidr with h3: no matrix line for h3: $ERR"
[[ "$ERR" == *"h1 (index 0) -> h2 (index 1): eth1 10.78.0.2 reached"* ]] || fail "cidr with h3: matrix: $ERR"
[[ "$OUT" != *started* ]] || fail "cidr with h3: ranks were started"
ok "an unreachable network: the per-host reachability matrix names h3, nothing started"

# 5. strangers at the driver during discovery ----------------------------------------------------
# An ssh wrapper first in PATH starts h3's task service 4 s late, which keeps the driver
# waiting long enough to be attacked from h3, and runs h2's under strace, which records the
# bytes of its REGISTER request so that they can be replayed. The task service goes on as
# h2's supervisor and starts the rank: strace lets go of the rank at its exec (-b execve: a
# sanitizer's leak check cannot run under ptrace), and the traced supervisor does no leak
# check of its own.
mkdir -p "$TMP/slowbin"
cat >"$TMP/slowbin/ssh" <<EOF
#!/bin/bash
args=("\$@")
case "\$*" in
  *" h3 "*internal-task-service*) sleep 4 ;;
  *" h2 "*internal-task-service*)
    args[-1]="ASAN_OPTIONS=detect_leaks=0 strace -f -b execve -xx -s 70000 -e trace=write,sendto -o $TMP/h2.trace \${args[-1]}" ;;
esac
exec "$HVD_NETBED_DIR/bin/ssh" "\${args[@]}"
EOF
chmod 755 "$TMP/slowbin/ssh"
(cd "$TMP" && PATH="$TMP/slowbin:$PATH" on h1 timeout -k 5 120 "$HVDRUN" --disable-cache --verbose \
  -np 3 -H h1:1,h2:1,h3:1 "$HVD_BUILD_DIR/examples/hello" >"$TMP/out" 2>"$TMP/err") &
job=$!
port=$(driver_port "$TMP/out")
[[ -n "$port" ]] || fail "attack: no driver port in: $(cat "$TMP/out")"
# garbage after the challenge
on h3 bash -c "exec 3<>/dev/tcp/10.77.0.1/$port; head -c 24 <&3 >/dev/null;
  printf 'GET / HTTP/1.0\r\nHost: x\r\n\r\nGARBAGE GARBAGE GARBAGE GARBAGE GARBAGE' >&3; sleep 0.3" || true
# a well-formed REGISTER (type 16) request, seq 0, 4-byte body, signed with no key (zero MAC)
on h3 bash -c "exec 3<>/dev/tcp/10.77.0.1/$port; head -c 24 <&3 >/dev/null;
  printf 'HVDQ\x01\x00\x10\x00\x00\x00\x00\x00\x04\x00\x00\x00' >&3;
  head -c 48 /dev/zero >&3; printf 'AAAA' >&3; sleep 0.3" || true
# h2's real REGISTER (its 64-byte prefix, then its body, as strace saw them written), sent again
# on a new connection: its MAC covers the challenge of the connection it was made for
replay=$TMP/register.bin
for _ in $(seq 60); do
  /usr/bin/python3 - "$TMP/h2.trace" "$replay" 2>/dev/null <<'PY' && break
import re, sys
calls = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r'(\d+)\s+(?:write|sendto)\((\d+), "((?:\\x[0-9a-f]{2})*)"', line)
    if m:
        calls.append((m.group(1), m.group(2), bytes.fromhex(m.group(3).replace("\\x", ""))))
for i, (pid, fd, data) in enumerate(calls):
    if data[:8] == b"HVDQ\x01\x00\x10\x00" and len(data) == 64:
        length = int.from_bytes(data[12:16], "little")
        body = next((d for p, f, d in calls[i + 1:] if p == pid and f == fd), b"")
        if len(body) == length:
            open(sys.argv[2], "wb").write(data + body)
            sys.exit(0)
sys.exit(1)
PY
  sleep 0.05
done
[[ -s "$replay" ]] || fail "attack: no REGISTER of h2 recorded: $(head -c 2000 "$TMP/h2.trace" 2>&1)"
on h3 /usr/bin/python3 -c '
import socket, sys
s = socket.create_connection(("10.77.0.1", int(sys.argv[1])), timeout=5)
s.recv(24)
s.sendall(open(sys.argv[2], "rb").read())
s.settimeout(5)
try:
    while s.recv(4096): pass
except OSError: pass
' "$port" "$replay" || true
wait "$job" || fail "attack: the job failed: $(cat "$TMP/err")"
err=$(cat "$TMP/err")
n=$(grep -c "rejected a message from 10.77.0.3" <<<"$err" || true)
((n >= 3)) || fail "attack: expected 3 logged rejections from 10.77.0.3, got $n: $err"
macs=$(grep -c "rejected a message from 10.77.0.3:[0-9]*: bad MAC" <<<"$err" || true)
((macs >= 2)) || fail "attack: the forged and the replayed request were not both rejected for their MAC: $err"
grep -q "rank 2 of 3" "$TMP/out" || fail "attack: the job did not run: $(cat "$TMP/out")"
ok "garbage, a forged request and a replayed REGISTER at the driver: all rejected and logged, job unaffected"

# 5b. a task service killed, and stopped, during discovery (rows of the fault matrix) -----------
# h3's task service starts 4 s late (an ssh wrapper); the test hits it as soon as it runs.
# Killed: ssh reports a remote command killed by a signal with its 255, as it does a dropped
# connection, so horovodrun retries h3's task service as the ssh check would, and the launch
# completes. Stopped: the launch fails at --start-timeout naming h3. Nothing is left on any
# host either way.
task_service_pid() { # H: the task service on hH (not its ssh session's shell)
  local p
  for p in $(ip netns pids "${HVD_NETBED_PREFIX}h$1" 2>/dev/null); do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == horovodrun ]] &&
      grep -q -- --internal-task-service "/proc/$p/cmdline" 2>/dev/null && echo "$p"
  done
  return 0
}
mkdir -p "$TMP/latebin"
cat >"$TMP/latebin/ssh" <<EOF
#!/bin/bash
# h3's task service late by HVD_TEST_H3_LATE seconds (4), or until the file HVD_TEST_H3_GATE
# exists (60 s at most); or (HVD_TEST_H3_INPUT_GATE) started at once but without its input
# until that file exists, so that it is still before its registration whenever the test
# stops or kills it
case "\$*" in
  *" h3 "*internal-task-service*)
    if [ -n "\${HVD_TEST_H3_INPUT_GATE:-}" ]; then
      # (ssh ends as the task service does; the copier then ends with the launcher's pipe)
      exec "$HVD_NETBED_DIR/bin/ssh" "\$@" < <(
        for _ in \$(seq 600); do [ -e "\$HVD_TEST_H3_INPUT_GATE" ] && break; sleep 0.1; done
        exec cat)
    elif [ -n "\${HVD_TEST_H3_GATE:-}" ]; then
      for _ in \$(seq 600); do [ -e "\$HVD_TEST_H3_GATE" ] && break; sleep 0.1; done
    else
      sleep \${HVD_TEST_H3_LATE:-4}
    fi ;;
esac
exec "$HVD_NETBED_DIR/bin/ssh" "\$@"
EOF
chmod 755 "$TMP/latebin/ssh"
for sig in KILL STOP; do
  limit=15
  [[ $sig == KILL ]] && limit=30 # room for the retry
  rm -f "$TMP/h3-input"
  (cd "$TMP" && HVD_TEST_H3_INPUT_GATE=$TMP/h3-input PATH="$TMP/latebin:$PATH" on h1 \
    timeout -k 5 120 "$HVDRUN" --disable-cache --verbose --start-timeout $limit -np 3 \
    -H h1:1,h2:1,h3:1 "$HVD_BUILD_DIR/examples/hello" >"$TMP/out" 2>"$TMP/err") &
  job=$!
  ts=""
  for _ in $(seq 200); do
    ts=$(task_service_pid 3)
    [[ -n $ts ]] && break
    sleep 0.05
  done
  [[ -n $ts ]] || fail "task service $sig: h3's task service never ran: $(cat "$TMP/err")"
  kill -"$sig" "$ts"
  touch "$TMP/h3-input" # (the retry after a kill gets its input at once)
  t0=$SECONDS
  RC=0
  wait "$job" || RC=$?
  took=$((SECONDS - t0))
  ERR=$(cat "$TMP/err")
  # (the launch may have ended it already: SIGKILL reaches a stopped process too)
  [[ $sig == STOP ]] && { kill -CONT "$ts" 2>/dev/null || true; }
  if [[ $sig == KILL ]]; then
    ((RC == 0)) || fail "task service killed: the launch failed (exit $RC): $ERR"
    grep -q "rank 2 of 3" "$TMP/out" || fail "task service killed: the job did not run: $(cat "$TMP/out")"
    n=$(grep -c "Launching horovod task function: ssh .* h3 " "$TMP/out" || true)
    ((n >= 2)) || fail "task service killed: h3's task service was started $n times, expected a retry"
    what="h3's task service retried, the job ran"
  else
    ((RC != 0)) || fail "task service stopped: the launch succeeded"
    # (stopped before or after it registered: either way the driver names it and what it
    # has not done)
    named=$(grep -o "h3 (index 2) has not [^.;]*" <<<"$ERR" | head -1 || true)
    [[ "$named" == *"registered its task service"* || "$named" == *"reported its probe"* ]] ||
      fail "task service stopped: h3 is not named: $ERR"
    ((took <= limit + 1)) || fail "task service stopped: the launch took $took s more to fail (--start-timeout $limit): $ERR"
    what="the launch failed $took s later: $named"
  fi
  bed_settles 10 || fail "task service $sig: processes left 10 s after: $(ps -o pid=,args= -p $left)"
  ok "h3's task service SIG$sig during discovery: $what; nothing left"
done

# 5c. the driver and a task service under a barrage (the fault matrix's port rows) -------------
# While h3's task service waits for the test, h3 holds 1,000 idle connections to the driver and
# sends 10,000 bad requests to it and 10,000 to h2's task service (2,000 each under ASan;
# tests/e2e/barrage.py: noise, wrong magic or version, lengths over the limit, truncated
# heads, unsigned, forged and out-of-sequence requests). Then: nothing was served, the log
# stays short, neither process grew by 1 MiB or more of resident memory, and the launch
# completes.
BARRAGE=$HVD_SOURCE_DIR/tests/e2e/barrage.py
# Under AddressSanitizer the code paths are what matters (each kind of bad request, the
# eviction at the connection limit), not the count: 2,000 each there, which keeps this step
# well inside the task services' --start-timeout on a loaded machine. Freed memory waits in
# ASan's quarantine, so resident memory says nothing about leaks there (as in
# e2e.port_barrage): the plain build checks it.
sanitized=0
grep -q '__asan_init' "$HVDRUN" && sanitized=1
bad=10000
((sanitized)) && bad=2000
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# (emptied first: the background job opens it only when it starts, and driver_port must not
# read the previous step's port meanwhile, then look for a launcher not started yet)
: >"$TMP/out"
(cd "$TMP" && HVD_TEST_H3_GATE=$TMP/h3-go PATH="$TMP/latebin:$PATH" on h1 timeout -k 5 150 \
  "$HVDRUN" --disable-cache --verbose --start-timeout 120 -np 3 -H h1:1,h2:1,h3:1 \
  "$HVD_BUILD_DIR/examples/hello" >"$TMP/out" 2>"$TMP/err") &
job=$!
port=$(driver_port "$TMP/out")
[[ -n "$port" ]] || fail "barrage: no driver port in: $(cat "$TMP/out")"
launcher=$(pgrep -o -f "^$HVDRUN --disable-cache --verbose --start-timeout 120 -np 3") ||
  fail "barrage: no launcher; its output: $(cat "$TMP/out" "$TMP/err")"
task=""
for _ in $(seq 100); do
  task=$(task_service_pid 2 | head -1)
  tport=""
  [[ -n $task ]] && tport=$(on h2 ss -Hltnp | grep "pid=$task," | awk '{print $4}' | sed 's/.*://' | head -1 || true)
  [[ -n $tport ]] && break
  sleep 0.05
done
[[ -n $tport ]] || fail "barrage: h2's task service does not listen"
sleep 0.5 # both settled after their first requests
driver_before=$(rss_kib "$launcher")
task_before=$(rss_kib "$task")
on h3 /usr/bin/python3 "$BARRAGE" idle "10.77.0.1:$port" 1000 "$TMP/idle-done" >"$TMP/idle.out" 2>&1 &
idle=$!
sleep 1
t0=$SECONDS
on h3 /usr/bin/python3 "$BARRAGE" service "10.77.0.1:$port" $bad >"$TMP/driver.barrage" 2>&1 ||
  fail "barrage at the driver: $(cat "$TMP/driver.barrage"); the launch: $(cat "$TMP/err")"
on h3 /usr/bin/python3 "$BARRAGE" service "10.77.0.2:$tport" $bad >"$TMP/task.barrage" 2>&1 ||
  fail "barrage at h2's task service ($((SECONDS - t0)) s after the first): $(cat "$TMP/task.barrage"); the launch: $(cat "$TMP/err")"
took=$((SECONDS - t0))
driver_after=$(rss_kib "$launcher")
task_after=$(rss_kib "$task")
touch "$TMP/idle-done" "$TMP/h3-go"
wait "$idle" || true
RC=0
wait "$job" || RC=$?
ERR=$(cat "$TMP/err")
((RC == 0)) || fail "barrage: the launch failed (exit $RC): $ERR"
grep -q "rank 2 of 3" "$TMP/out" || fail "barrage: the job did not run: $(cat "$TMP/out")"
lines=$(grep -c "rejected a message\|more messages were rejected\|to make room for" <<<"$ERR" || true)
((lines <= 200)) || fail "barrage: $lines log lines for $((2 * bad)) bad requests"
((sanitized || driver_after - driver_before < 1024)) ||
  fail "barrage: the driver's process grew from $driver_before to $driver_after KiB"
((sanitized || task_after - task_before < 1024)) ||
  fail "barrage: h2's task service grew from $task_before to $task_after KiB"
ok "barrage at the driver and h2's task service ($(cat "$TMP/driver.barrage"); $(cat "$TMP/task.barrage"); $(cat "$TMP/idle.out")): in $took s; resident memory $driver_before -> $driver_after KiB and $task_before -> $task_after KiB, $lines log lines, the launch completed"

# 6. the start-up cache --------------------------------------------------------------------------
run_on_h1 --verbose -np 3 -H h1:1,h2:1,h3:1 sh -c "$report"
((RC == 0)) || fail "cache (first): $ERR"
[[ "$OUT" == *"Testing interfaces on all the hosts."* ]] || fail "cache (first) did not discover: $OUT"
run_on_h1 --verbose -np 3 -H h1:1,h2:1,h3:1 sh -c "$report"
((RC == 0)) || fail "cache (second): $ERR"
[[ "$OUT" == *"SSH was successful into all the remote hosts (cached)."* ]] || fail "cache: ssh not cached: $OUT"
[[ "$OUT" == *"Common interface found (cached): eth0"* ]] || fail "cache: discovery not cached: $OUT"
[[ "$OUT" != *"Testing interfaces"* && "$OUT" != *"Checking ssh"* ]] || fail "cache: checks ran again: $OUT"
[[ "$OUT" == *"[2]<stdout>:2 iface=eth0 nccl=eth0 addr=10.77.0.1"* ]] || fail "cache: env: $OUT"
[[ "$(stat -c %a "$HOME/.horovod")" == 700 ]] || fail "cache: directory mode $(stat -c %a "$HOME/.horovod")"
ok "second launch uses the cached ssh check and discovery (cache dir mode 700)"

# 7. the network check ----------------------------------------------------------------------------
command -v iptables >/dev/null || fail "iptables is not installed (scripts/install-deps.sh installs it)"
run_on_h1 --check-network -H h1:1,h2:1
((RC == 0)) || fail "check (h1+h2): exit $RC: $OUT $ERR"
grep -Eq '^  h1 +- +ok$' <<<"$OUT" && grep -Eq '^  h2 +ok +-$' <<<"$OUT" ||
  fail "check (h1+h2): the matrix: $OUT"
[[ "$OUT" == *"Interfaces that work on every link: eth0 eth1"* && "$OUT" != *Failures* ]] ||
  fail "check (h1+h2): $OUT"
# h3 has no eth1: it has no route to the others' (which fails no link: eth0 works on all)
run_on_h1 --check-network -H h1:1,h2:1,h3:1
((RC == 0)) || fail "check (h1+h2+h3): exit $RC: $OUT $ERR"
grep -Eq '^  h1 +- +ok +ok$' <<<"$OUT" && grep -Eq '^  h3 +1 of 2 +1 of 2 +-$' <<<"$OUT" ||
  fail "check (h1+h2+h3): the matrix: $OUT"
[[ "$OUT" == *"h3 -> h1: eth1 10.78.0.1 no route"* && "$OUT" == *"Failures (2 of 6 links):"* ]] &&
  grep -q '^Interfaces that work on every link: eth0$' <<<"$OUT" || fail "check (h1+h2+h3): $OUT"
ok "--check-network: h1+h2 every link ok on eth0 and eth1; with h3, its missing eth1 named (no route), eth0 common"
# faults: h2's eth1 link drops everything; h3 drops new connections from h1 to its ephemeral
# ports (its task service's: the port filtered) and refuses h2's with a reset; h3 still has
# no route to eth1. (h1 still reaches every host's sshd, and every host h1's driver on eth0.)
on h2 iptables -A INPUT -i eth1 -j DROP
on h3 iptables -A INPUT -s 10.77.0.1 -p tcp --syn --dport 32768:60999 -j DROP
on h3 iptables -A INPUT -s 10.77.0.2 -p tcp --syn --dport 32768:60999 -j REJECT --reject-with tcp-reset
t0=$SECONDS
run_on_h1 --check-network -H h1:1,h2:1,h3:1
took=$((SECONDS - t0))
((RC == 1)) || fail "check (faults): exit $RC, not 1: $OUT $ERR"
grep -Eq '^  h1 +- +1 of 2 +FAIL$' <<<"$OUT" && grep -Eq '^  h2 +1 of 2 +- +FAIL$' <<<"$OUT" &&
  grep -Eq '^  h3 +1 of 2 +1 of 2 +-$' <<<"$OUT" || fail "check (faults): the matrix: $OUT"
for want in "h1 -> h2: eth1 10.78.0.2 timed out" "h2 -> h1: eth1 10.78.0.1 timed out" \
  "h1 -> h3: eth0 10.77.0.3 timed out" "h2 -> h3: eth0 10.77.0.3 refused" \
  "h3 -> h2: eth1 10.78.0.2 no route" \
  "Failures (6 of 6 links):" "Interfaces that work on every link: none"; do
  [[ "$OUT" == *"$want"* ]] || fail "check (faults): no '$want' in: $OUT"
done
ok "--check-network names the dropped link, the filtered port, the refusal and the missing route (in $took s)"
