#!/usr/bin/env bash
# The benchmark tools work as the README documents: hvd_allreduce_perf prints the
# nccl-tests table with checked results for every mode, models a training step's allreduces
# (async, blocking, one buffer) with fusion on and off, fails loudly on bad options, and
# tools/compare_allreduce.sh produces its table (peers that are not installed are reported
# as such, not as failures).
source "$(dirname "$0")/lib.sh"
PERF="$HVD_BUILD_DIR/tools/hvd_allreduce_perf"

for mode in allreduce allgather broadcast alltoall reducescatter; do
  out=$("$HVDRUN" -np 3 "$PERF" -m "$mode" -b 4 -e 300K -f 9 -n 3 -w 1 -r 2 2>&1) ||
    fail "hvd_allreduce_perf -m $mode failed: $out"
  expect_contains "$mode header" "$out" "#wrong"
  expect_contains "$mode result" "$out" "Out of bounds values : 0 OK"
  rows=$(grep -cE '^\[0\]<stdout>: +[0-9]+ +[0-9]+ ' <<<"$out" || true)
  expect_eq "$mode: one row per size (4, 36, 324, 2916, 26244, 236196 B)" 6 "$rows"
done

out=$("$HVDRUN" -np 2 "$PERF" -d float16 -o avg -I -b 2 -e 64K -f 32 -n 2 -w 0 2>&1) ||
  fail "in-place float16 average failed: $out"
expect_contains "float16 average" "$out" "float16     avg"
expect_contains "float16 average result" "$out" "0 OK"

# -m step: 20 tensors of 4 B .. 64 KiB (float32: 1 .. 16384 elements), every step checked;
# once with the core's default fusion threshold and once with fusion off.
for ft in default 0; do
  if [[ $ft == default ]]; then
    unset HOROVOD_FUSION_THRESHOLD
    want_ft="fusion threshold: 134217728 B"
  else
    export HOROVOD_FUSION_THRESHOLD=$ft
    want_ft="fusion threshold: 0 B"
  fi
  out=$("$HVDRUN" -np 2 "$PERF" -m step -N 20 -b 4 -e 65536 -w 1 -n 3 2>&1) ||
    fail "hvd_allreduce_perf -m step (fusion threshold $ft) failed: $out"
  expect_contains "step header (fusion $ft)" "$out" "20 tensors of 4..65536 B"
  expect_contains "step fusion threshold (fusion $ft)" "$out" "$want_ft"
  for variant in async blocking one-buffer; do
    grep -qE "^\[0\]<stdout>: +$variant +[0-9]+ +[0-9]+ +float32 +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0\$" \
      <<<"$out" || fail "step (fusion $ft): no '$variant' row with 0 wrong in: $out"
  done
  expect_contains "step result (fusion $ft)" "$out" "Out of bounds values : 0 OK"
done
unset HOROVOD_FUSION_THRESHOLD

if "$PERF" -m nosuchmode >"$TMP/bad" 2>&1; then fail "an unknown mode must fail"; fi
expect_contains "unknown mode" "$(cat "$TMP/bad")" "unknown mode 'nosuchmode'"

out=$("$HVD_SOURCE_DIR/tools/compare_allreduce.sh" --build "$HVD_BUILD_DIR" --np 2 \
  --sizes "8 64K" -n 5 -w 1 --out "$TMP/cmp" 2>&1) || fail "compare_allreduce.sh failed: $out"
expect_contains "comparison table" "$out" "hvd_us"
line=$(grep -E '^2 +8 ' <<<"$out" || true)
[[ $line =~ ^2\ +8\ +[0-9]+\.[0-9]+ ]] || fail "no hvd time for 8 B in: $out"
[[ -s "$TMP/cmp/info.txt" ]] || fail "compare_allreduce.sh wrote no raw outputs"

# tools/bench_many_ranks.sh: a clean run is counted clean; a run with an error line is not,
# and keeps its output (a build whose hello fails stands in for a broken job).
out=$("$HVD_SOURCE_DIR/tools/bench_many_ranks.sh" --build "$HVD_BUILD_DIR" --np 3 --runs 2 2>&1) ||
  fail "bench_many_ranks.sh failed on a clean job: $out"
expect_contains "many ranks summary" "$out" "np 3: 2 of 2 runs clean"
out=$("$HVD_SOURCE_DIR/tools/bench_many_ranks.sh" --build "$HVD_BUILD_DIR" --elastic --np 3 --runs 1 2>&1) ||
  fail "bench_many_ranks.sh --elastic failed on a clean job: $out"
expect_contains "many ranks elastic summary" "$out" "np 3: 1 of 1 runs clean"
mkdir -p "$TMP/badbuild/examples"
ln -s "$HVD_BUILD_DIR/horovodrun" "$TMP/badbuild/horovodrun"
printf '#!/bin/sh\necho "hello from rank $HOROVOD_RANK"\necho "some error" >&2\n' >"$TMP/badbuild/examples/hello"
chmod +x "$TMP/badbuild/examples/hello"
if out=$("$HVD_SOURCE_DIR/tools/bench_many_ranks.sh" --build "$TMP/badbuild" --np 2 --runs 1 2>&1); then
  fail "bench_many_ranks.sh counted a run with error lines clean: $out"
fi
expect_contains "many ranks failed run" "$out" "np 2: 0 of 1 runs clean"
expect_contains "many ranks keeps the output" "$out" "output kept in"

# tools/rendezvous_sim: simulated ranks (an odd count, split over two client processes and
# uneven hosts) each get through the planned check-in, or (--all-records) every record, from
# the store's real server; a row per rank count.
for mode in planned all; do
  flag=()
  words="checked in after"
  [[ $mode == all ]] && flag=(--all-records) && words="all records after"
  out=$("$HVD_BUILD_DIR/tools/rendezvous_sim" --ranks "1 301" --per-host 7 --procs 2 --timeout 60 \
    "${flag[@]}" 2>&1) || fail "rendezvous_sim ($mode) failed: $out"
  grep -Eq "^ +1 ranks +ok +$words +[0-9.]+ s" <<<"$out" || fail "no row for 1 rank ($mode): $out"
  grep -Eq '^ +301 ranks +ok .*store: peak RSS +[0-9.]+ MiB.* 0 retries' <<<"$out" ||
    fail "no clean row for 301 ranks ($mode): $out"
done
if out=$("$HVD_BUILD_DIR/tools/rendezvous_sim" --ranks "12 0" 2>&1); then
  fail "rendezvous_sim accepted 0 ranks: $out"
fi
expect_contains "rendezvous_sim bad count" "$out" "bad rank count '0'"
echo "PASS"
