#!/usr/bin/env bash
# What the core says when a job fails (tests/e2e/test_core_faults.sh checks the statuses and
# timing of the same faults; this checks the words), with tests/mrank/async_check on 4 ranks:
#  (a) the failure is attributed to the rank where it happened: a rank that only relayed the
#      cause to its peers must not be named as the one that "failed first";
#      - stall shutdown decided by the stall inspector on rank 0,
#      - rank 1 _exit()ing while the others wait;
#  (b) the error is logged once where it is decided: the stall inspector's shutdown message
#      appears once in rank 0's stderr.
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
np=4
problems=()

field() {
  sed -n "s/^$2=//p" "$1" | head -1
}

# attributed DIR ORIGIN WHAT: every "rank N (host H) failed first" in the ranks' messages
# names ORIGIN.
attributed() {
  local dir=$1 origin=$2 what=$3 f msg n
  for f in "$dir"/rank.*; do
    msg=$(field "$f" msg)
    echo "$what, ${f##*/}: ${msg:0:200}"
    while read -r n; do
      [[ -z $n || $n == "$origin" ]] && continue
      problems+=("$what: ${f##*/}'s message says rank $n failed first, but rank $origin did: $msg")
    done < <(grep -o 'rank [0-9]* (host [^)]*) failed first' <<<"$msg" | sed 's/^rank \([0-9]*\) .*/\1/')
  done
}

# ---- stall shutdown (rank 0's stall inspector decides) --------------------------------------
dir=$TMP/never
mkdir -p "$dir"
run_hvd -np $np --stall-check-warning-time-seconds 1 --stall-check-shutdown-time-seconds 2 \
  "$CHECK" stall_never --dir "$dir"
no_sanitizer_reports "stall_never np=$np"
((RC != 0)) || fail "the stalled job ended successfully: $OUT $ERR"
n=$(find "$dir" -name 'rank.*' | wc -l)
expect_eq "ranks that reported the stall shutdown ($OUT $ERR)" $np "$n"
attributed "$dir" 0 "stall shutdown"
logged=$(grep -c '^\[0\]<stderr>:.*One or more rank (marked by "!") is stalled' "$TMP/err" || true)
echo "rank 0 logged the stall shutdown $logged times"
((logged == 1)) || problems+=("rank 0 logged the stall shutdown $logged times, not once:
$(grep '^\[0\]<stderr>:\[' "$TMP/err")")

# ---- peer death (rank 1 exits) -------------------------------------------------------------
dir=$TMP/death
mkdir -p "$dir"
run_hvd -np $np "$CHECK" peer_death --dir "$dir"
no_sanitizer_reports "peer_death np=$np"
expect_eq "horovodrun exit code (the victim's): $ERR" 3 "$RC"
n=$(find "$dir" -name 'rank.*' | wc -l)
expect_eq "survivors that reported the death ($OUT $ERR)" $((np - 1)) "$n"
attributed "$dir" 1 "peer death"

if ((${#problems[@]})); then
  printf 'FAIL: %s\n' "${problems[@]}" >&2
  exit 1
fi
pass
