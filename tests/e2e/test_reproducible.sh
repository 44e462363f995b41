#!/usr/bin/env bash
# HVD_REPRODUCIBLE=1: every allreduce sums each element in rank order on every path, so its
# bits depend only on the inputs.
#  (a) over TCP (HVD_SHM=0, the direct-exchange path between hosts) the conformance check
#      passes at np 4 (where the halving path would run) and np 5 (uneven segments);
#  (b) collectives_check --mode digest (inexact float32/64, float16, bfloat16 sums and
#      averages, scaled, through the small and large paths) prints the same digest on one
#      host in the arena, over TCP, and on three pseudo-hosts of two ranks with the
#      hierarchical allreduce asked for; over TCP without the setting it differs (the ring's
#      order), which shows the digest can tell;
#  (c) ranks that disagree on the setting all fail at once, naming it.
source "$(dirname "$0")/lib.sh"
CHECK="$HVD_BUILD_DIR/tests/mrank/collectives_check"
[[ -x $CHECK ]] || fail "$CHECK not built"

# ---- (a) -------------------------------------------------------------------------------------
for np in 4 5; do
  HVD_SHM=0 HVD_REPRODUCIBLE=1 run_hvd -np "$np" "$CHECK" --quick
  expect_eq "np $np conformance over TCP in rank order: exit ($(tail -n 5 "$TMP/err"))" 0 "$RC"
  expect_contains "np $np conformance" "$OUT" "0 failed on rank 0, 0 on all ranks"
done

# ---- (b) -------------------------------------------------------------------------------------
# [VAR=value...] digest WHAT HOROVODRUN-ARGS...: the digest rank 0 printed (the variables, set
# for the call, reach the job)
digest() {
  local what=$1 d
  shift
  run_hvd "$@" "$CHECK" --mode digest
  expect_eq "$what: exit ($(tail -n 5 "$TMP/err"))" 0 "$RC"
  d=$(grep -o 'digest [0-9a-f]* (the same on every rank)' <<<"$OUT") || fail "$what: no digest: $OUT"
  echo "${d#digest }" | cut -d' ' -f1
}
arena3=$(HVD_SHM=1 digest "np 3 in the arena" -np 3)
tcp3=$(HVD_SHM=0 HVD_REPRODUCIBLE=1 digest "np 3 over TCP in rank order" -np 3)
expect_eq "np 3: digest over TCP in rank order against the arena's" "$arena3" "$tcp3"
ring3=$(HVD_SHM=0 digest "np 3 over TCP (the ring)" -np 3)
[[ $ring3 != "$arena3" ]] || fail "the ring's digest equals the arena's ($ring3): the digest cannot tell orders apart"
arena6=$(HVD_SHM=1 digest "np 6 in the arena" -np 6)
hier6=$(HOROVOD_HIERARCHICAL_ALLREDUCE=1 HVD_REPRODUCIBLE=1 digest "3 pseudo-hosts x 2 in rank order" \
  -np 6 -H 127.0.0.1:2,127.0.0.2:2,127.0.0.3:2)
expect_eq "np 6: digest on 3 hosts in rank order against one host's" "$arena6" "$hier6"
echo "ok   digests: np 3 $arena3 (arena = TCP in rank order; the ring's $ring3), np 6 $arena6 (one host = 3 hosts)"

# ---- (c) -------------------------------------------------------------------------------------
# shellcheck disable=SC2016 # expanded by the rank's shell
HVD_SHM=0 run_hvd -np 3 sh -c 'if [ "$HOROVOD_RANK" = 1 ]; then export HVD_REPRODUCIBLE=1; fi; exec "$0" --mode digest' "$CHECK"
[[ $RC -ne 0 ]] || fail "ranks disagreeing on HVD_REPRODUCIBLE ran to the end"
for r in 0 1 2; do
  expect_contains "rank $r's error" "$ERR" "[$r]<stderr>:collectives_check [rank $r]: digest allreduce 0 of 1000 elements: HVD_ERR_MISMATCH: rank "
done
expect_contains "the mismatch" "$ERR" "runs with HVD_REPRODUCIBLE=1 but rank 0 with 0: every rank must set the same value"
pass
