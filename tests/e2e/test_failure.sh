#!/usr/bin/env bash
# When one rank fails, the others are terminated within 2 s and horovodrun reports the first
# failing rank, its exit code or signal and its last stderr lines, and exits non-zero.
source "$(dirname "$0")/lib.sh"

mark="hvd-e2e-fail-$$"
start=$(date +%s%N)
run_hvd -np 4 sh -c "if [ \$HOROVOD_RANK = 2 ]; then echo 'loading data' >&2; echo 'disk on fire' >&2; sleep 0.5; exit 3; fi; exec sleep 60 # $mark"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_eq "exit code is the failing rank's" 3 "$RC"
# 0.5 s until the failure, then at most 2 s to end the others (they obey SIGTERM)
((elapsed_ms < 2500 + 2000)) || fail "job took ${elapsed_ms} ms to end after the failure"
expect_contains "names the rank" "$ERR" "rank 2"
expect_contains "names the code" "$ERR" "exit code 3"
expect_contains "last stderr lines" "$ERR" "disk on fire"
expect_contains "last stderr lines" "$ERR" "loading data"
no_procs_with "$mark" || fail "ranks left running: $(procs_with "$mark")"

# killed by a signal: reported as such, exit 128+9
run_hvd -np 2 sh -c 'if [ $HOROVOD_RANK = 1 ]; then kill -9 $$; fi; exec sleep 60'
expect_eq "signal exit code" 137 "$RC"
expect_contains "names the signal" "$ERR" "SIGKILL"
expect_contains "names the rank" "$ERR" "rank 1"

# a command that does not exist
run_hvd -np 2 /nonexistent/hvd-e2e-no-such-program
[[ $RC -ne 0 ]] || fail "missing program reported success"
expect_contains "names the program" "$ERR" "/nonexistent/hvd-e2e-no-such-program"

# one rank exits 0 early, the others go on and succeed
run_hvd -np 3 sh -c 'if [ $HOROVOD_RANK = 0 ]; then exit 0; fi; sleep 0.5; echo done'
expect_eq "early success exit" 0 "$RC"
expect_eq "others finished" 2 "$(grep -c 'done' <<<"$OUT")"

# a rank that ignores SIGTERM is killed after the grace period, not left behind
mark2="hvd-e2e-stubborn-$$"
run_hvd -np 2 sh -c "if [ \$HOROVOD_RANK = 0 ]; then sleep 0.3; exit 1; fi; trap '' TERM; sleep 60 # $mark2"
expect_eq "exit code" 1 "$RC"
wait_until 10 no_procs_with "$mark2" || fail "stubborn rank survived"
pass
