#!/usr/bin/env bash
# hvd_init through the launcher's store: a rank that never arrives is named in the timeout,
# which counts from the latest check-in (ranks that keep arriving, each within it, all get
# in); a process without the job's secret is refused.
source "$(dirname "$0")/lib.sh"

run_hvd -np 3 --gloo-timeout-seconds 2 sh -c "if [ \$HOROVOD_RANK = 1 ]; then sleep 20; else exec $HELLO; fi"
[[ $RC -ne 0 ]] || fail "a missing rank went unnoticed"
expect_contains "timeout names the missing rank" "$ERR" "ranks 1 (1 of 3 missing) never did"
expect_contains "timeout is an HVD_ERR_TIMEOUT" "$ERR" "HVD_ERR_TIMEOUT"

# Check-ins 2 s apart, the last 4 s after the first, with a 3 s timeout.
run_hvd -np 3 --gloo-timeout-seconds 3 sh -c "sleep \$((HOROVOD_RANK * 2)); exec $HELLO"
expect_eq "staggered check-ins within the timeout of each other" 0 "$RC"
expect_contains "the last to arrive got in" "$OUT" "hello from rank 2 of 3"

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
