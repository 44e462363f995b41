#!/usr/bin/env bash
# Same-host ranks exchange through shared memory (memfd rings handed over an authenticated
# abstract unix socket), and HVD_SHM=0 sends everything over loopback TCP:
#  (a) the conformance check passes both ways, and the debug log shows which path every
#      connection took;
#  (b) after every process of a job is SIGKILLed mid-run, nothing is left behind: no hvd
#      entry in /dev/shm or /tmp (the memory is a memfd and the sockets are abstract, so
#      there is nothing to leave; other tests running beside this one may create files of
#      their own, hence only hvd's names are compared).
source "$(dirname "$0")/lib.sh"

CHECK="$HVD_BUILD_DIR/tests/mrank/collectives_check"
[[ -x $CHECK ]] || fail "$CHECK not built"

# ---- (a) both paths ------------------------------------------------------------------------
HOROVOD_LOG_LEVEL=debug run_hvd -np 3 "$CHECK" --quick
expect_eq "shm run exit" 0 "$RC"
# (the library logs to the rank's stdout below warning level)
links() { cat "$TMP/out" "$TMP/err" | grep -E "connected to rank|accepted data connection" || true; }
shm_links=$(links | grep -c "through shared memory" || true)
# 3 ranks talk pairwise: every pair connects once, logged by both ends
[[ $shm_links -ge 6 ]] || fail "expected every connection through shared memory, got $shm_links:
$(links)"
if links | grep -vq "shared memory"; then
  fail "a same-host connection used TCP: $(links)"
fi

HVD_SHM=0 HOROVOD_LOG_LEVEL=debug run_hvd -np 3 "$CHECK" --quick
expect_eq "tcp run exit" 0 "$RC"
expect_not_contains "HVD_SHM=0 log" "$(links)" "through shared memory"
expect_contains "HVD_SHM=0 log" "$(links)" "connected to rank"

# ---- (b) nothing left after SIGKILL --------------------------------------------------------
hvd_files() { ls -A /dev/shm /tmp 2>/dev/null | grep -i hvd | sort; }
before=$(hvd_files)
timeout -k 5 60 "$HVDRUN" -np 3 "$CHECK" --big >"$TMP/out" 2>"$TMP/err" &
launcher=$!
wait_until 20 bash -c "[ \$(pgrep -f -c '^$CHECK --big') -ge 3 ] && grep -q '@hvd-data-' /proc/net/unix" ||
  fail "the job did not start with same-host sockets: $(cat "$TMP/err")"
pkill -KILL -f "^$CHECK --big" || true
kill -KILL "$launcher" 2>/dev/null || true
wait "$launcher" 2>/dev/null || true
wait_until 10 no_procs_with "^$CHECK --big" || fail "ranks survived SIGKILL"
expect_eq "hvd files in /dev/shm and /tmp after SIGKILL" "$before" "$(hvd_files)"

pass
