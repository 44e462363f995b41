#!/usr/bin/env bash
# hvd_init through the launcher's store: a rank that never arrives is named in the timeout,
# which counts from the latest check-in (ranks that keep arriving, each within it, all get
# in); a poll the store leaves unanswered is asked again; a process without the job's secret
# is refused.
source "$(dirname "$0")/lib.sh"

run_hvd -np 3 --gloo-timeout-seconds 2 sh -c "if [ \$HOROVOD_RANK = 1 ]; then sleep 20; else exec $HELLO; fi"
[[ $RC -ne 0 ]] || fail "a missing rank went unnoticed"
expect_contains "timeout names the missing rank" "$ERR" "ranks 1 (1 of 3 missing) never did"
expect_contains "timeout is an HVD_ERR_TIMEOUT" "$ERR" "HVD_ERR_TIMEOUT"

# Check-ins 2 s apart, the last 4 s after the first, with a 3 s timeout.
run_hvd -np 3 --gloo-timeout-seconds 3 sh -c "sleep \$((HOROVOD_RANK * 2)); exec $HELLO"
expect_eq "staggered check-ins within the timeout of each other" 0 "$RC"
expect_contains "the last to arrive got in" "$OUT" "hello from rank 2 of 3"

# The same for an elastic round (a driver starting hundreds of workers takes longer than the
# timeout): no worker gives up and retries its hvd_init.
run_hvd --gloo-timeout-seconds 3 -np 3 --min-np 3 -H 127.0.0.1:3 sh -c "sleep \$((HOROVOD_LOCAL_RANK * 2)); \
  exec $HVD_BUILD_DIR/tests/elastic_worker --steps 4 --commit-every 2"
expect_eq "staggered elastic check-ins ($(tail -n 3 "$TMP/err"))" 0 "$RC"
expect_contains "staggered elastic: exact result, no reset" "$OUT" "done step 4 acc 6 resets 0"
expect_not_contains "staggered elastic: no worker retried" "$OUT$ERR" "trying again"

# An elastic round whose store stops answering for 4 s while a worker waits for the other to
# check in (a store busy with hundreds of workers starting): the waiting worker's poll goes
# unanswered past its deadline, and it asks again instead of failing its hvd_init.
timeout -k 5 60 "$HVDRUN" -np 2 --min-np 2 -H 127.0.0.1:2 sh -c "[ \$HOROVOD_LOCAL_RANK = 1 ] && sleep 2; \
  exec $HVD_BUILD_DIR/tests/elastic_worker --steps 4 --commit-every 2" >"$TMP/out" 2>"$TMP/err" &
job=$!
wait_until 20 pgrep -f "tests/elastic_worker --steps 4 " >/dev/null || fail "no worker started: $(cat "$TMP/err")"
sleep 0.5
launcher=$(pgrep -P "$job" -x horovodrun)
kill -STOP "$launcher"
sleep 4
kill -CONT "$launcher"
rc=0
wait "$job" || rc=$?
expect_eq "elastic job with its store stopped for 4 s ($(tail -n 3 "$TMP/err"))" 0 "$rc"
expect_contains "exact result" "$(cat "$TMP/out")" "done step 4 acc 6 resets 0"
expect_not_contains "no failed check-in" "$(cat "$TMP/out" "$TMP/err")" "could not complete the rendezvous"

run_hvd -np 2 sh -c "_HOROVOD_SECRET_KEY=$(printf '%064d' 7) exec $HELLO"
[[ $RC -ne 0 ]] || fail "a wrong secret was accepted"
expect_contains "wrong secret" "$ERR" "HVD_ERR_AUTH"
expect_contains "wrong secret explained" "$ERR" "job secret does not match"

# A stranger on the rendezvous port: unauthenticated requests change nothing and the job
# still completes.
port_file="$TMP/port"
run_hvd -np 2 sh -c "if [ \$HOROVOD_RANK = 0 ]; then echo \$HOROVOD_GLOO_RENDEZVOUS_PORT > $port_file; \
  code=\$(curl -s -o /dev/null -w '%{http_code}' -X PUT --data x http://127.0.0.1:\$HOROVOD_GLOO_RENDEZVOUS_PORT/init.0/rank_1 2>/dev/null || echo none); echo stranger=\$code; fi; exec $HELLO"
expect_eq "exit with a stranger around" 0 "$RC"
if command -v curl >/dev/null; then expect_contains "stranger refused" "$OUT" "stranger=401"; fi
expect_contains "rank 1 fine" "$OUT" "hello from rank 1 of 2"
pass
