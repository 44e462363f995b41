#!/usr/bin/env bash
# Elastic mode across hosts: three network namespaces with sshd each (tests/netns/netbed.sh),
# horovodrun on h1 running the deterministic elastic worker on h1, h2 and h3 over ssh.
#   1. h3 is cut off (its link taken down) mid-training: the driver hears no heartbeat from
#      its worker for HOROVOD_GLOO_TIMEOUT_SECONDS, blacklists h3, and the job goes on on h1
#      and h2 to the exact result, within the timeout + a few seconds, not after a hang;
#   2. when the link comes back, nothing of the job is left running on h3;
#   3. a host discovery adds while its sshd is down is left out with ssh's error and no reset;
#   4. a round's two new workers on one host run under one supervisor (one ssh session).
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns or sshd).
set -euo pipefail
: "${HVD_BUILD_DIR:?set by ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns_require test_elastic

HVDRUN=$HVD_BUILD_DIR/horovodrun
WORKER=$HVD_BUILD_DIR/tests/elastic_worker
TMP=$(mktemp -d /tmp/hvd-netns-elastic.XXXXXX)
netns_tmp=$TMP
netns_bed_up 3
export HOME=$TMP/home
mkdir -p "$HOME"

printf 'h1:1\nh2:1\nh3:1\n' >"$TMP/hosts"
printf '#!/bin/sh\ncat "%s/hosts"\n' "$TMP" >"$TMP/discover.sh"
chmod +x "$TMP/discover.sh"

# start_job NP STEPS [horovodrun options]: the elastic worker under horovodrun on h1, in the
# background (output in $TMP/out and $TMP/err).
start_job() {
  local np=$1 steps=$2
  shift 2
  # emptied here, not by the job's redirection: the checks that follow read these files at
  # once, and the previous job's lines (commits well past the next threshold) must not pass
  # them before this job has started (a round's supervisors were counted as 0 that way)
  : >"$TMP/out"
  : >"$TMP/err"
  (cd "$TMP" && on h1 timeout -k 5 150 "$HVDRUN" --host-discovery-script "$TMP/discover.sh" \
    -np "$np" --min-np 2 --network-interface eth0 "$@" "$WORKER" --steps "$steps" \
    --commit-every 2 --sleep-ms 40 >"$TMP/out" 2>"$TMP/err") &
  job=$!
}

# expect_completed STEPS WHAT: the job exited 0 with the worker's exact result.
expect_completed() {
  set +e
  wait "$job"
  local rc=$?
  set -e
  [[ $rc -eq 0 ]] || fail "the job did not complete $2 (exit $rc): $(cat "$TMP/err")"
  grep -aq "done step $1 " "$TMP/out" || fail "no exact result $2: $(cat "$TMP/out")"
}

HOROVOD_GLOO_TIMEOUT_SECONDS=5 start_job 3 150

commit_at_least() {
  local c
  c=$(grep -ao 'commit [0-9]*' "$TMP/out" | tail -1 | awk '{print $2}')
  [[ -n "$c" && "$c" -ge "$1" ]]
}
saw() { grep -aq -- "$1" "$TMP/err"; }

wait_until 60 commit_at_least 6 || fail "no progress across hosts: $(cat "$TMP/out" "$TMP/err")"
ok "training across h1, h2, h3"
ip -n "${HVD_NETBED_PREFIX}h3" link set eth0 down
t0=$SECONDS
wait_until 30 saw 'sent no heartbeat for 5 s' || fail "cut-off host not detected: $(cat "$TMP/err")"
((SECONDS - t0 <= 9)) || fail "cut-off host detected only after $((SECONDS - t0)) s"
ok "h3 cut off: detected after $((SECONDS - t0)) s (timeout 5 s)"
expect_completed 150 "after losing h3"
grep -q 'blacklisting host h3' "$TMP/err" || fail "h3 not blacklisted: $(cat "$TMP/err")"
commits_only_grow "$TMP/out"
ok "the job went on on h1 and h2 to the exact result, commits only growing"

ip -n "${HVD_NETBED_PREFIX}h3" link set eth0 up
h3_workers() { ip netns pids "${HVD_NETBED_PREFIX}h3" | xargs -r -n1 sh -c 'grep -l elastic_worker /proc/$0/cmdline 2>/dev/null' ; }
no_h3_workers() { [[ -z "$(h3_workers)" ]]; }
wait_until 60 no_h3_workers || fail "the worker on h3 outlived the job: $(h3_workers)"
ok "nothing left on h3 once its link is back"
# 3. A host discovery adds while its sshd is down is left out with a message, and costs no reset.
#    (Refused ssh fails at once; the start timeout only has to cover a loaded ASan start on h2.)
kill "$(cat "$HVD_NETBED_DIR/h3/sshd.pid")"
printf 'h1:1\nh2:1\n' >"$TMP/hosts"
start_job 2 500 --start-timeout 60
wait_until 60 commit_at_least 4 || fail "no progress on h1, h2: $(cat "$TMP/out" "$TMP/err")"
printf 'h1:1\nh2:1\nh3:1\n' >"$TMP/hosts"
wait_until 40 saw 'discovered host h3 does not answer ssh' ||
  fail "unreachable h3 not reported: $(cat "$TMP/err")"
expect_completed 500 "after h3 was discovered"
if grep -q 'round 1' "$TMP/err"; then fail "an unreachable host cost a reset: $(cat "$TMP/err")"; fi
grep -q 'ssh not successful for host h3' "$TMP/err" || fail "ssh's error not shown: $(cat "$TMP/err")"
ok "h3 added while unreachable over ssh: left out with ssh's error, no reset"
# 4. A round's new workers on one host start through one ssh session (one supervisor).
printf 'h1:1\nh2:2\n' >"$TMP/hosts"
start_job 3 150
wait_until 60 commit_at_least 2 || fail "no progress on h1, h2 x2: $(cat "$TMP/out" "$TMP/err")"
supervisors=0
for p in $(ip netns pids "${HVD_NETBED_PREFIX}h2"); do
  grep -q -- --internal-exec "/proc/$p/cmdline" 2>/dev/null || continue
  pp=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) || continue
  grep -q -- --internal-exec "/proc/$pp/cmdline" 2>/dev/null || supervisors=$((supervisors + 1))
done
((supervisors == 1)) || fail "$supervisors supervisors for h2's two workers, expected one"
expect_completed 150 "with two workers on h2"
ok "two workers on h2 under one supervisor (one ssh session), exact result"
echo "PASS: test_elastic (netns)"
