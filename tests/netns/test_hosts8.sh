#!/usr/bin/env bash
# Eight hosts, two ranks each: the smaller version of the 32-host bed that
# tools/bench_launch_hosts.sh and tools/bench_elastic_hosts.sh measure (docs/benchmarks.md).
# Eight network namespaces with sshd each (tests/netns/netbed.sh), horovodrun on h1.
#   1. a first launch with NIC discovery (no cache): a task service on every host, the
#      common interface found (eth0), every blocking collective checked across the 16 ranks
#      (collectives_check --quick, four dtypes: 8-bit sums of 16 ranks near their range);
#      then the cached launch (every rank through hvd_init), without discovery
#   2. elastic: every process of the job on h5 killed mid-training (its sshd stays, as a host
#      that rebooted) and h5 gone from the discovery script's list: the 14 survivors resume
#      from the last commit; h5 listed again after the cool-down: its two workers rejoin, the
#      world is 16 again, and the job ends (a stop file) with the exact result (the worker
#      checks it), commits only growing
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns or sshd).
set -euo pipefail
: "${HVD_BUILD_DIR:?set by ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns_require test_hosts8

HVDRUN=$HVD_BUILD_DIR/horovodrun
CHECK=$HVD_BUILD_DIR/tests/mrank/collectives_check
WORKER=$HVD_BUILD_DIR/tests/elastic_worker
TMP=$(mktemp -d /tmp/hvd-hosts8.XXXXXX)
netns_tmp=$TMP
netns_bed_up 8 --hostnames
export HOME=$TMP/home # the start-up cache lives in $HOME/.horovod
mkdir -p "$HOME"
spec=h1:2,h2:2,h3:2,h4:2,h5:2,h6:2,h7:2,h8:2

# 1. launch with NIC discovery, then from the cache
run_on_h1 --verbose -np 16 -H "$spec" "$CHECK" --quick --dtypes float32,int32,uint8,float16
[[ $RC -eq 0 ]] || fail "collectives across 8 hosts (exit $RC): $ERR"
summary=$(grep -a 'collectives_check: np=16 quick:' <<<"$OUT" || true)
[[ $summary == *" 0 failed on rank 0, 0 on all ranks"* ]] || fail "collectives across 8 hosts: $OUT"
grep -aq "Driver service listening on port" "$TMP/out" ||
  fail "the first launch did not run NIC discovery: $ERR"
grep -aq "Common interface found: eth0" "$TMP/out" || fail "no common interface eth0: $OUT"
ok "uncached launch, 16 ranks on 8 hosts: ${summary#*:}"
run_on_h1 --verbose -np 16 -H "$spec" "$HVD_BUILD_DIR/examples/hello"
[[ $RC -eq 0 ]] || fail "cached launch across 8 hosts (exit $RC): $ERR"
(($(grep -c '<stdout>:hello from rank' <<<"$OUT") == 16)) || fail "cached launch: not 16 hellos: $OUT"
if grep -aq "Driver service listening on port" "$TMP/out"; then
  fail "the second launch ran NIC discovery again instead of using the cache: $ERR"
fi
ok "cached launch, no discovery"

# 2. elastic: lose h5, then have it back
list_hosts() { # the discovery script's list, without host $1 (none: 0)
  local i
  for ((i = 1; i <= 8; i++)); do ((i == $1)) || echo "h$i:2"; done >"$TMP/hosts.new"
  mv "$TMP/hosts.new" "$TMP/hosts"
}
list_hosts 0
printf '#!/bin/sh\ncat "%s/hosts"\n' "$TMP" >"$TMP/discover.sh"
chmod +x "$TMP/discover.sh"
: >"$TMP/out"
: >"$TMP/err"
(cd "$TMP" && on h1 timeout -k 5 240 "$HVDRUN" --host-discovery-script "$TMP/discover.sh" \
  -np 16 --min-np 2 --blacklist-cooldown-range 1 2 --network-interface eth0 "$WORKER" \
  --steps 1000000 --commit-every 4 --sleep-ms 20 --stop-file "$TMP/stop" >"$TMP/out" \
  2>"$TMP/err") &
job=$!
commits_of() { grep -ac "size $1 " "$TMP/out" || true; }
at_least() { (($(commits_of "$1") >= $2)); }
wait_until 150 at_least 16 2 || fail "no progress of 16 ranks on 8 hosts: $(cat "$TMP/out" "$TMP/err")"
list_hosts 5
for p in $(ip netns pids "${HVD_NETBED_PREFIX}h5"); do
  grep -q listener "/proc/$p/cmdline" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
done
t0=$SECONDS
wait_until 60 at_least 14 1 || fail "the survivors did not resume without h5: $(cat "$TMP/err")"
ok "h5 killed: 14 ranks resumed after $((SECONDS - t0)) s"
before=$(commits_of 16)
sleep 2.5 # past the cool-down of a host blacklisted at the kill
list_hosts 0
wait_until 90 at_least 16 $((before + 1)) || fail "h5 did not rejoin: $(cat "$TMP/err")"
ok "h5 listed again: the world is 16 again"
touch "$TMP/stop"
set +e
wait "$job"
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "the elastic job failed (exit $rc): $(cat "$TMP/err")"
grep -aqE "done step [0-9]+ " "$TMP/out" || fail "no exact result: $(cat "$TMP/out")"
commits_only_grow "$TMP/out"
ok "exact result after losing and regaining h5, commits only growing"
echo "PASS: test_hosts8 (netns)"
