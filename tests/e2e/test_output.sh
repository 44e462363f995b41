#!/usr/bin/env bash
# Output lines are tagged and whole; --output-filename also writes per-rank files.
source "$(dirname "$0")/lib.sh"

# Two ranks each write 2000 long lines as fast as they can, in small pieces: every line
# arrives whole, with its own rank's tag.
gen='i=0; line=$(printf "%0300d" 0 | tr 0 $HOROVOD_RANK); while [ $i -lt 2000 ]; do printf "%s" "${line%??????????}"; printf "%s\n" "${line#${line%??????????}}"; i=$((i+1)); done'
run_hvd -np 2 sh -c "$gen"
expect_eq "exit" 0 "$RC"
for r in 0 1; do
  n=$(grep -c "^\[$r\]<stdout>:$(printf "%0300d" 0 | tr 0 $r)\$" <<<"$OUT" || true)
  expect_eq "whole lines of rank $r" 2000 "$n"
done
expect_eq "no other lines" 4000 "$(wc -l <<<"$OUT")"

# stderr tagging, \r splitting, unterminated last line
run_hvd -np 1 sh -c 'printf "err line\n" >&2; printf "10%%\r20%%\rdone\n"; printf "tail"'
expect_contains "stderr tag" "$ERR" "[0]<stderr>:err line"
expect_eq "stdout" "$(printf '[0]<stdout>:10%%\r[0]<stdout>:20%%\r[0]<stdout>:done\n[0]<stdout>:tail')" "$OUT"

# timestamps
run_hvd --prefix-output-with-timestamp -np 1 echo stamped
[[ "$OUT" =~ ^[A-Z][a-z]{2}\ [A-Z][a-z]{2}\ [\ 0-9][0-9]\ [0-9:]{8}\ [0-9]{4}\[0\]\<stdout\>:stamped$ ]] ||
  fail "timestamp prefix: [$OUT]"

# --output-filename: one directory per rank, zero-padded to the largest rank's width
run_hvd --output-filename "$TMP/logs" -np 11 sh -c 'echo out $HOROVOD_RANK; echo err $HOROVOD_RANK >&2'
expect_eq "exit" 0 "$RC"
for r in 0 5 10; do
  d=$(printf "%s/logs/rank.%02d" "$TMP" "$r")
  [[ -f $d/stdout && -f $d/stderr ]] || fail "missing $d/stdout or stderr: $(ls "$TMP/logs")"
  expect_contains "rank $r stdout file" "$(cat "$d/stdout")" "out $r"
  expect_contains "rank $r stderr file" "$(cat "$d/stderr")" "err $r"
done
run_hvd --output-filename "$TMP/one" -np 1 echo single
expect_eq "np=1 exit" 0 "$RC"
expect_contains "np=1 file" "$(cat "$TMP/one/rank.0/stdout")" "single"
pass
