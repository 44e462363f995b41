#!/usr/bin/env bash
# Failures seen by the core's named asynchronous operations, with tests/mrank/async_check as
# the job under the real horovodrun:
#  (a) rank 1 _exit(3)s while the others wait on handles it will never complete: every
#      survivor's hvd_wait returns HVD_ERR_PEER_LOST naming rank 1 within 2 s, later calls
#      fail at once, hvd_shutdown returns; horovodrun reports rank 1 as the first to fail.
#  (b) stall warning: rank 1 enqueues "late" 3 s after the others (and, once the name is
#      in the response cache, "late_cached" 4 s after): rank 0 warns, naming the tensor and
#      rank 1 only as missing, and both operations then complete.
#  (c) stall shutdown: rank 1 never enqueues "never": the job ends within a bound, every rank
#      failing with HVD_ERR_TIMEOUT and the stall inspector's message.
# horovodrun SIGTERMs every rank once one fails; in (a) and (c) the ranks ignore SIGTERM and
# write what the library told them to files before anything else.
source "$(dirname "$0")/lib.sh"

CHECK="$HVD_BUILD_DIR/tests/mrank/async_check"
[[ -x $CHECK ]] || fail "$CHECK not built"

# no_sanitizer_reports WHAT: the last job's output holds no ASan/LSan/UBSan report (a rank
# that already wrote its result may still fail its leak check at exit).
no_sanitizer_reports() {
  if grep -qE 'Sanitizer|runtime error:' "$TMP/out" "$TMP/err" 2>/dev/null; then
    fail "$1: sanitizer report:
$(grep -hE -A20 'Sanitizer|runtime error:' "$TMP/out" "$TMP/err" | head -60)"
  fi
}

# field FILE KEY: the value of KEY=... in FILE
field() {
  sed -n "s/^$2=//p" "$1" | head -1
}

# ---- (a) peer death ------------------------------------------------------------------------
for np in 2 4; do
  dir=$TMP/death$np
  mkdir -p "$dir"
  start=$SECONDS
  run_hvd -np $np "$CHECK" peer_death --dir "$dir"
  no_sanitizer_reports "peer_death np=$np"
  echo "peer_death np=$np: horovodrun exit $RC after $((SECONDS - start)) s"
  expect_eq "horovodrun exit code (the victim's) (stderr: $ERR)" 3 "$RC"
  expect_contains "horovodrun names the first failure" "$ERR" \
    "rank 1 (host localhost) was the first to fail: exit code 3"
  [[ -f $dir/victim ]] || fail "np=$np: the victim never got to its exit: $OUT $ERR"
  t_fault=$(sed -n 's/.*t_ns=\([0-9]*\).*/\1/p' "$dir/victim")
  for ((r = 0; r < np; r++)); do
    ((r == 1)) && continue
    f=$dir/rank.$r
    [[ -f $f ]] || fail "np=$np: rank $r wrote no result (killed before its wait returned?)
$OUT
$ERR"
    st=$(field "$f" status)
    msg=$(field "$f" msg)
    delay_ms=$((($(field "$f" err_ns) - t_fault) / 1000000))
    echo "np=$np rank $r: $st ${delay_ms} ms after the victim's exit: $msg"
    expect_eq "np=$np rank $r: hvd_wait of a handle pending when rank 1 died ($msg)" \
      HVD_ERR_PEER_LOST "$st"
    expect_contains "np=$np rank $r: the message names the dead rank" "$msg" "rank 1 (host"
    ((delay_ms <= 2000)) || fail "np=$np rank $r: hvd_wait failed ${delay_ms} ms after rank 1 died"
    both=$(field "$f" both)
    [[ $both == HVD_OK || $both == HVD_ERR_PEER_LOST ]] ||
      fail "np=$np rank $r: the handle rank 1 had enqueued too: $both"
    expect_eq "np=$np rank $r: an enqueue after the failure" HVD_ERR_PEER_LOST \
      "$(field "$f" after_async)"
    expect_contains "np=$np rank $r: the enqueue's message names the dead rank" \
      "$(field "$f" after_async_msg)" "rank 1 (host"
    expect_eq "np=$np rank $r: a blocking call after the failure" HVD_ERR_PEER_LOST \
      "$(field "$f" after_blocking)"
    later=$(field "$f" later_ms)
    ((later < 1000)) || fail "np=$np rank $r: the calls after the failure took $later ms"
    expect_eq "np=$np rank $r: hvd_shutdown after the failure" HVD_OK "$(field "$f" shutdown)"
    sms=$(field "$f" shutdown_ms)
    ((sms < 3000)) || fail "np=$np rank $r: hvd_shutdown took $sms ms"
  done
done

# ---- (b) stall warning, then completion -------------------------------------------------------
np=3
start=$SECONDS
HOROVOD_STALL_CHECK_TIME_SECONDS=1 run_hvd -np $np "$CHECK" stall_late --delay-ms 3000
no_sanitizer_reports "stall_late np=$np"
echo "stall_late: horovodrun exit $RC after $((SECONDS - start)) s"
expect_eq "stall_late exit code (stdout: $OUT; stderr: $ERR)" 0 "$RC"
for ((r = 0; r < np; r++)); do
  expect_contains "rank $r completed the late operation" "$OUT" "[$r]<stdout>:rank $r: late ok"
done
expect_contains "every check passed" "$OUT" "[0]<stdout>:async_check stall_late: ok"
expect_contains "stall warning" "$ERR" "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 1 seconds."
expect_contains "stall warning lists missing ranks" "$ERR" "[0]<stderr>:Missing ranks:"
# (and what rank 1 does instead, sleeping in its own code: its pid, and its last operation)
doing="; pid [0-9]+, waits in no operation \(it runs its own code, or has left the training loop\)"
grep -Eq "^\[0\]<stderr>:1 \(host localhost, missing for [0-9]+ s\): \[late\]$doing and has finished none$" "$TMP/err" ||
  fail "no stall warning naming rank 1 as missing 'late', and what it does:
$ERR"
grep -Eq "^\[0\]<stderr>:1 \(host localhost, missing for [0-9]+ s\): \[late_cached\]$doing; its last, 'late_cached', ended [0-9.]+ s ago$" "$TMP/err" ||
  fail "no stall warning naming rank 1 as missing 'late_cached' (a name in the response cache), and what it does:
$ERR"
! grep -q '^\[[0-9]*\]<stderr>:[02] (host' "$TMP/err" ||
  fail "a stall warning names rank 0 or 2, which were not missing anything:
$ERR"
! grep -q '^\[[12]\]<stderr>:Missing ranks' "$TMP/err" ||
  fail "a rank other than the coordinator (0) printed a stall warning:
$ERR"

# ---- (c) stall shutdown ----------------------------------------------------------------------
dir=$TMP/never
mkdir -p "$dir"
start=$SECONDS
run_hvd -np $np --stall-check-warning-time-seconds 1 --stall-check-shutdown-time-seconds 2 \
  --gloo-timeout-seconds 60 "$CHECK" stall_never --dir "$dir"
no_sanitizer_reports "stall_never np=$np"
elapsed=$((SECONDS - start))
echo "stall_never: horovodrun exit $RC after $elapsed s"
((RC != 0)) || fail "a job whose rank never submitted a tensor ended successfully: $OUT $ERR"
((elapsed <= 20)) || fail "the stalled job took $elapsed s to end (shutdown time 2 s)"
expect_contains "the job's error names the stall" "$ERR" \
  'One or more rank (marked by "!") is stalled for longer than 2 seconds. Will shutdown.'
expect_contains "the job's error names the missing rank and tensor" "$ERR" \
  "1! (host localhost, missing for"
grep -Eq "^\[0\]<stderr>:.*1! \(host localhost, missing for [0-9]+ s\): \[never\]; pid [0-9]+, waits in the blocking call barrier" "$TMP/err" ||
  fail "the stall shutdown does not say that rank 1 waits in a barrier:
$ERR"
for ((r = 0; r < np; r++)); do
  f=$dir/rank.$r
  [[ -f $f ]] || fail "rank $r wrote no result:
$OUT
$ERR"
  st=$(field "$f" status)
  msg=$(field "$f" msg)
  secs=$(field "$f" seconds)
  echo "rank $r: $st after $secs s: ${msg:0:160}..."
  expect_eq "rank $r: status of the stalled job's pending call ($msg)" HVD_ERR_TIMEOUT "$st"
  expect_contains "rank $r: the message is the stall inspector's" "$msg" "Will shutdown."
  expect_contains "rank $r: the message names the tensor" "$msg" "[never]"
  ((${secs%.*} >= 1 && ${secs%.*} < 15)) || fail "rank $r: failed after $secs s"
done
pass
