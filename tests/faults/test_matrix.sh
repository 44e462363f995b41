#!/usr/bin/env bash
# One row of the fault matrix: test_matrix.sh ROLE PHASE FAULT, a job of tests/faults/fault_worker
# (3 ranks on loopback, HOROVOD_GLOO_TIMEOUT_SECONDS=2) under the real horovodrun.
#
#   ROLE   rank (rank 1 is hit), rank0 (the coordinator is hit), horovodrun (the launcher with
#          its rendezvous store is hit; in its init row the last rank checks in 2 s late, so
#          that the others wait in their check-in while it is hit)
#   PHASE  init (the others wait in their check-in), small / large (8-byte / 16 MiB allreduces),
#          negotiate (64 named tensors at a time), shutdown (every rank is in hvd_shutdown)
#   FAULT  kill (SIGKILL), stop (SIGSTOP, SIGCONT once the others have reported), exit0 (the
#          rank returns 0 early without hvd_shutdown; in phase init, instead of hvd_init);
#          in phase shutdown also left_stopped (SIGSTOP, never continued) and linger (the rank
#          runs on T + 3 s after the others exited), see left_behind_row
#
# What must happen:
#   a rank killed, or exited early: every other rank fails with HVD_ERR_PEER_LOST within 2 s,
#     with a message naming the rank (and, for exit0, that it exited without hvd_shutdown);
#     its next collective fails the same way at once, and hvd_shutdown returns;
#   a rank exited 0 instead of calling hvd_init: every other rank fails within 1 s, naming it;
#   a rank stopped: every other rank fails with HVD_ERR_TIMEOUT between the timeout - 1 s and
#     the timeout + 1 s, naming the rank;
#   in hvd_shutdown: the others' hvd_shutdown returns HVD_OK within 2 s (kill) or the
#     timeout + 1 s (stop): the victim is not needed any more;
#   horovodrun stopped: the collectives keep going while it is stopped, and the job finishes
#     with every rank right after SIGCONT; horovodrun killed: every rank is gone within 10 s;
#   in every row: horovodrun ends, and no process of the job is left 10 s later.
# The ranks ignore SIGTERM (horovodrun's way of ending the others once one failed), so what
# they report is the library's doing. The measured times are printed (the README's table).
#
# FAULT_NP (default 3), FAULT_HOSTS (a -H list: pseudo-hosts 127.0.0.x) and FAULT_OP
# (allreduce, or allgather for the loop phases) vary the job; the victim is then rank
# FAULT_NP - 2 for role rank. Every surviving rank's message must name the victim, also on
# several hosts, where a rank may wait for one blocked behind the victim: the blocked rank's
# wait record in its host's arena, or its own timeout arriving within the transport's grace,
# names the victim then.
source "$(dirname "$0")/../e2e/lib.sh"

role=${1:?role} phase=${2:?phase} fault=${3:?fault}
W="$HVD_BUILD_DIR/tests/fault_worker"
[[ -x $W ]] || fail "$W was not built"
# the rows of a rank measure against the timeout; those of horovodrun must not meet it
T=2 np=${FAULT_NP:-3}
[[ $role == horovodrun ]] && T=10
hosts=()
[[ -n ${FAULT_HOSTS:-} ]] && hosts=(-H "$FAULT_HOSTS")
export HOROVOD_GLOO_TIMEOUT_SECONDS=$T
dir=$TMP/job
mkdir -p "$dir"
JOB=

# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  set +e
  [[ -n $JOB ]] && kill -CONT "$JOB" 2>/dev/null
  local p
  for p in $(pgrep -f -- "$dir"); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  [[ -n "${KEEP_TMP:-}" ]] || rm -rf "$TMP"
}
trap cleanup EXIT

field() { sed -n "s/^$2=//p" "$1" | head -1; }
victim_field() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" "$dir/victim"; } # pid, t_ns
ms_between() { echo $((($2 - $1) / 1000000)); }
start_job() { # worker arguments
  timeout -k 5 90 "$HVDRUN" -np "$np" "${hosts[@]}" "$W" --dir "$dir" --op "${FAULT_OP:-allreduce}" "$@" \
    >"$TMP/out" 2>"$TMP/err" &
  JOB=$!
}
finish_job() { # DEADLINE_S: wait for horovodrun; sets RC, OUT, ERR
  wait_until "$1" eval '! kill -0 $JOB 2>/dev/null' || fail "horovodrun still runs after $1 s:
$(cat "$TMP/out" "$TMP/err")"
  set +e
  wait "$JOB"
  RC=$?
  set -e
  JOB=
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
}
nothing_left() { # within 10 s no process of the job is left
  wait_until 10 eval '[[ -z "$(pgrep -f -- "$dir")" ]]' ||
    fail "processes of the job left 10 s after it ended: $(pgrep -af -- "$dir")"
  ok "nothing left"
}
ok() { echo "ok   $*"; }
progress() { # the iterations all ranks reported so far
  local r n sum=0
  for ((r = 0; r < np; r++)); do
    n=$(cat "$dir/progress.$r" 2>/dev/null || true)
    sum=$((sum + ${n:-0}))
  done
  echo "$sum"
}
have_all() { # NAME: DIR/NAME.R exists for every rank but the victim
  local r
  for ((r = 0; r < np; r++)); do
    [[ ${victim:--1} -eq $r ]] || [[ -s $dir/$1.$r ]] || return 1
  done
}

# ---- a rank is hit -------------------------------------------------------------------------
rank_row() {
  victim=$1
  local sig=$fault
  start_job --phase "$phase" --victim "$victim" --signal "$sig"
  if [[ $fault == stop ]]; then
    # (and the victim has struck: in phase shutdown the others may report before its timer
    # fires, which a loaded machine delays)
    wait_until $((T + 20)) eval 'have_all rank && [[ -s $dir/victim ]]' ||
      fail "the others did not report, or the victim did not strike, within $((T + 20)) s:
$(cat "$TMP/out" "$TMP/err")"
    local vpid
    vpid=$(victim_field pid)
    kill -CONT "$vpid" 2>/dev/null || true # horovodrun may have ended it already
  fi
  finish_job 30
  [[ -f $dir/victim ]] || fail "the victim never struck:
$OUT
$ERR"
  local t_fault r want min max
  t_fault=$(victim_field t_ns)
  if [[ $phase == shutdown ]]; then
    want=HVD_OK min=0 max=2000
    [[ $fault == stop ]] && max=$(((T + 1) * 1000))
  elif [[ $fault == stop ]]; then
    want=HVD_ERR_TIMEOUT min=$(((T - 1) * 1000)) max=$(((T + 1) * 1000))
  else
    want=HVD_ERR_PEER_LOST min=0 max=2000
    [[ $fault == exit0 && $phase == init ]] && max=1000 # horovodrun saw it go: at once
  fi
  local named=0
  for ((r = 0; r < np; r++)); do
    ((r == victim)) && continue
    local f=$dir/rank.$r st msg took
    [[ -f $f ]] || fail "rank $r wrote no report:
$OUT
$ERR"
    st=$(field "$f" status)
    msg=$(field "$f" msg)
    [[ $st == "$want" ]] || fail "rank $r: $st, expected $want: $msg"
    if [[ $phase == shutdown ]]; then
      # how long its hvd_shutdown took, whenever the victim was hit
      took=$(ms_between "$(field "$f" call_ns)" "$(field "$f" err_ns)")
    else
      took=$(ms_between "$t_fault" "$(field "$f" err_ns)")
      if [[ $msg =~ ranks?\ $victim([^0-9]|$) ]]; then
        named=$((named + 1))
      else
        fail "rank $r: the message does not name rank $victim: $msg"
      fi
      if [[ $fault == exit0 && $phase == init ]]; then
        [[ $msg == *"rank $victim (host "*") exited with status 0 before hvd_init"* ]] || fail "rank $r: the message does not say rank $victim exited before hvd_init: $msg"
      elif [[ $fault == exit0 ]]; then
        [[ $msg == *"exited without calling hvd_shutdown"* ]] || fail "rank $r: the message does not say rank $victim exited without hvd_shutdown: $msg"
      fi
    fi
    ((took >= min && took <= max)) || fail "rank $r: $st after $took ms, expected $min..$max ms: $msg"
    if [[ $phase != init && $phase != shutdown ]]; then
      [[ $(field "$f" second) == "$want" ]] || fail "rank $r: the next collective returned $(field "$f" second), not $want"
      local sms
      sms=$(field "$f" shutdown_ms)
      [[ -n $sms ]] && ((${sms%.*} < 3000)) || fail "rank $r: hvd_shutdown took '$sms' ms after $want"
    fi
    echo "row $role/$phase/$fault: rank $r: $st after $took ms: $msg"
  done
  [[ $phase == shutdown ]] || ((named > 0)) || fail "no rank's message names rank $victim"
  if [[ $fault == kill ]]; then
    [[ $ERR == *"rank $victim (host "*") was the first to fail: killed by signal 9"* ]] ||
      fail "horovodrun does not name rank $victim as the first to fail:
$ERR"
  fi
  [[ $RC -ne 0 || $phase == shutdown ]] || fail "horovodrun exited 0 after rank $victim's $fault"
  nothing_left
}

# ---- a rank left behind after the others exited --------------------------------------------
# left_stopped: the victim is stopped inside its hvd_shutdown and never continued; the others
# finish. horovodrun names it at once and kills it T s later, failing the job naming it.
# linger: the victim goes on running (sleeping) T + 3 s after its hvd_shutdown while the others
# exit; it is never killed and the job ends 0.
left_behind_row() {
  victim=$1
  local t0=$SECONDS r
  if [[ $fault == left_stopped ]]; then
    start_job --phase shutdown --victim "$victim" --signal stop
  else
    start_job --phase shutdown --victim "$victim" --signal none --linger $((T + 3))
  fi
  finish_job $((T + 30))
  local took=$((SECONDS - t0))
  for ((r = 0; r < np; r++)); do
    ((r == victim)) && continue
    [[ $(field "$dir/rank.$r" status) == HVD_OK ]] || fail "rank $r: $(cat "$dir/rank.$r" 2>&1)"
  done
  if [[ $fault == left_stopped ]]; then
    local vpid
    vpid=$(victim_field pid)
    # (named as soon as seen stopped: maybe before the last of the others exited)
    [[ $ERR == *"rank $victim (host "*", pid $vpid) is stopped; "*" exited: it is killed in $T s unless it continues"* ]] ||
      fail "horovodrun did not name the stopped rank $victim (pid $vpid):
$ERR"
    [[ $ERR == *"rank $victim (host "*", pid $vpid) stayed stopped for $T s after every other rank had exited: killing it"* ]] ||
      fail "horovodrun did not say it killed rank $victim:
$ERR"
    [[ $ERR == *"rank $victim (host "*") was the first to fail: killed by signal 9"* ]] ||
      fail "horovodrun does not name rank $victim as the cause:
$ERR"
    ((RC == 137)) || fail "horovodrun exited $RC, expected 137 (the stopped rank killed)"
    echo "row $role/$phase/$fault: horovodrun ended after $took s (timeout $T s), exit $RC"
  else
    ((RC == 0)) || fail "the job failed (exit $RC) while a rank ran on after the others:
$ERR"
    [[ $ERR != *"killing it"* && $ERR != *"is stopped"* ]] || fail "horovodrun took the running rank $victim for a stopped one:
$ERR"
    [[ $(field "$dir/rank.$victim" status) == HVD_OK ]] || fail "rank $victim: $(cat "$dir/rank.$victim")"
    ((took >= T + 3)) || fail "horovodrun ended after $took s, before the running rank did (T + 3 s)"
    echo "row $role/$phase/$fault: the running rank was left alone; horovodrun ended after $took s, exit 0"
  fi
  nothing_left
}

# ---- horovodrun is hit ---------------------------------------------------------------------
launcher_row() {
  victim=-1
  local args=(--phase "$phase" --signal none --seconds 4)
  [[ $phase == init ]] && args=(--phase small --signal none --seconds 1 --init-delay 2)
  start_job "${args[@]}"
  if [[ $phase == init ]]; then # ranks 0 and 1 in their check-in, rank 2 not yet there
    wait_until 20 have_all pid || fail "the ranks did not start"
    sleep 0.5
  else
    wait_until 20 have_all loop || fail "the ranks did not reach their loop: $(cat "$TMP/err")"
  fi
  local t0=$SECONDS
  if [[ $fault == kill ]]; then
    kill -KILL "$JOB"
    wait_until 10 eval '[[ -z "$(pgrep -f -- "$dir")" ]]' ||
      fail "ranks left 10 s after horovodrun was killed: $(pgrep -af -- "$dir")"
    ok "every rank gone $((SECONDS - t0)) s after horovodrun was killed"
    set +e
    wait "$JOB"
    set -e
    JOB=
    return
  fi
  kill -STOP "$JOB"
  if [[ $phase != init ]]; then
    local before after r
    before=$(progress)
    sleep 2
    after=$(progress)
    ((after > before)) || fail "no collective ran while horovodrun was stopped ($before -> $after iterations)"
    ok "collectives went on while horovodrun was stopped ($before -> $after iterations in 2 s)"
  else
    sleep 1
  fi
  kill -CONT "$JOB"
  finish_job 40
  [[ $RC -eq 0 ]] || fail "the job failed after horovodrun was stopped and continued (exit $RC):
$OUT
$ERR"
  for ((r = 0; r < np; r++)); do
    [[ $(field "$dir/rank.$r" status) == HVD_OK ]] || fail "rank $r: $(cat "$dir/rank.$r")"
  done
  ok "the job finished after SIGCONT, every rank HVD_OK"
  nothing_left
}

case $role in
rank) if [[ $fault == left_stopped || $fault == linger ]]; then left_behind_row $((np - 2)); else rank_row $((np - 2)); fi ;;
rank0) rank_row 0 ;;
horovodrun) launcher_row ;;
*) fail "unknown role $role" ;;
esac
echo "test_matrix $role $phase $fault: passed"
