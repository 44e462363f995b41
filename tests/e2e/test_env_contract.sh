#!/usr/bin/env bash
# Every rank gets Horovod's worker environment, the secret only in its environment (never on a
# command line), and the computed variables win over inherited ones.
source "$(dirname "$0")/lib.sh"

# The issue's acceptance command: four tagged lines.
run_hvd -np 4 -H localhost:4 sh -c 'echo $HOROVOD_RANK $HOROVOD_SIZE'
expect_eq "exit code" 0 "$RC"
for r in 0 1 2 3; do expect_contains "rank $r line" "$OUT" "[$r]<stdout>:$r 4"; done
expect_eq "line count" 4 "$(grep -c . <<<"$OUT")"

# Full contract, with a stale HOROVOD_RANK in horovodrun's own environment.
dump='env | grep -E "^(HOROVOD_|_HOROVOD_SECRET_KEY=|NCCL_SOCKET_IFNAME=|PYTHONUNBUFFERED=|HVD_E2E_MARK=)" | sort'
HOROVOD_RANK=99 HVD_E2E_MARK=inherited run_hvd -np 3 -H localhost:2,127.0.0.1:2 sh -c "$dump"
expect_eq "exit code" 0 "$RC"
for r in 0 1 2; do
  lines=$(grep "^\[$r\]<stdout>:" <<<"$OUT" | sed "s/^\[$r\]<stdout>://")
  get() { grep "^$1=" <<<"$lines" | cut -d= -f2-; }
  expect_eq "rank $r HOROVOD_RANK" "$r" "$(get HOROVOD_RANK)"
  expect_eq "rank $r HOROVOD_SIZE" 3 "$(get HOROVOD_SIZE)"
  expect_eq "rank $r inherited var" inherited "$(get HVD_E2E_MARK)"
  expect_eq "rank $r HOROVOD_CONTROLLER" gloo "$(get HOROVOD_CONTROLLER)"
  expect_eq "rank $r HOROVOD_CPU_OPERATIONS" gloo "$(get HOROVOD_CPU_OPERATIONS)"
  expect_eq "rank $r PYTHONUNBUFFERED" 1 "$(get PYTHONUNBUFFERED)"
  [[ "$(get HOROVOD_GLOO_RENDEZVOUS_PORT)" =~ ^[0-9]+$ ]] || fail "rank $r has no rendezvous port"
  [[ -n "$(get HOROVOD_GLOO_RENDEZVOUS_ADDR)" ]] || fail "rank $r has no rendezvous address"
  [[ -n "$(get HOROVOD_GLOO_IFACE)" ]] || fail "rank $r has no HOROVOD_GLOO_IFACE"
  expect_eq "rank $r NCCL_SOCKET_IFNAME" "$(get HOROVOD_GLOO_IFACE)" "$(get NCCL_SOCKET_IFNAME)"
  [[ "$(get _HOROVOD_SECRET_KEY)" =~ ^[0-9a-f]{64}$ ]] || fail "rank $r has no secret"
done
# -H localhost:2,127.0.0.1:2 with -np 3: two ranks on localhost, one on 127.0.0.1
r2=$(grep '^\[2\]<stdout>:' <<<"$OUT" | sed 's/^\[2\]<stdout>://')
expect_contains "rank 2 host" "$r2" "HOROVOD_HOSTNAME=127.0.0.1"
expect_contains "rank 2 local rank" "$r2" "HOROVOD_LOCAL_RANK=0"
expect_contains "rank 2 local size" "$r2" "HOROVOD_LOCAL_SIZE=1"
expect_contains "rank 2 cross rank" "$r2" "HOROVOD_CROSS_RANK=1"
expect_contains "rank 2 cross size" "$r2" "HOROVOD_CROSS_SIZE=2"
r1=$(grep '^\[1\]<stdout>:' <<<"$OUT" | sed 's/^\[1\]<stdout>://')
expect_contains "rank 1 local rank" "$r1" "HOROVOD_LOCAL_RANK=1"
expect_contains "rank 1 cross size" "$r1" "HOROVOD_CROSS_SIZE=1"
# the same secret for every rank of a job, a different one for the next job
s0=$(grep -h '_HOROVOD_SECRET_KEY=' <<<"$OUT" | cut -d= -f2 | sort -u)
expect_eq "one secret per job" 1 "$(wc -l <<<"$s0")"
run_hvd -np 1 sh -c 'echo $_HOROVOD_SECRET_KEY'
[[ "${OUT#*:}" != "$s0" ]] || fail "two jobs got the same secret"
# the secret is never printed by horovodrun itself, even verbose
run_hvd --verbose -np 2 sh -c 'true'
expect_eq "verbose exit" 0 "$RC"
expect_contains "verbose prints worker commands" "$OUT$ERR" "HOROVOD_RANK=1"
expect_not_contains "secret in verbose output" "$OUT$ERR" "_HOROVOD_SECRET_KEY"

# The secret is not on any command line: look at every process while a job runs.
mark="hvd-e2e-ps-$$"
"$HVDRUN" -np 2 sh -c "sleep 30 # $mark" >"$TMP/ps.out" 2>&1 &
launcher=$!
# horovodrun's own command line carries the marker too; the ranks are the ones with a secret
have_secret() {
  secret=""
  for p in $(procs_with "$mark"); do
    secret=$(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep '^_HOROVOD_SECRET_KEY=' | cut -d= -f2 || true)
    [[ ${#secret} -eq 64 ]] && return 0
  done
  return 1
}
wait_until 20 have_secret || fail "job did not start, or its ranks have no secret"
[[ ${#secret} -eq 64 ]] || fail "could not read the secret of a running rank"
if ps -eo args | grep -F -- "$secret" | grep -v grep; then fail "secret visible in ps"; fi
for f in /proc/[0-9]*/cmdline; do
  if tr '\0' ' ' <"$f" 2>/dev/null | grep -qF -- "$secret"; then fail "secret in $f"; fi
done
kill -TERM "$launcher"
wait "$launcher" || true
wait_until 10 no_procs_with "$mark" || fail "ranks survived SIGTERM"

# hvd_init through the rendezvous for several job sizes
for np in 1 2 3 7; do
  run_hvd -np "$np" "$HELLO"
  expect_eq "hello np=$np exit" 0 "$RC"
  for ((r = 0; r < np; r++)); do
    expect_contains "hello np=$np rank $r" "$OUT" "[$r]<stdout>:hello from rank $r of $np "
  done
done

# Through an rsh agent (horovod.spark's way in): the host names are only names (never
# resolved: these are not hosts anywhere), every host is reached through the agent with its
# command, and the ranks keep the agent's environment: only the job's HOROVOD_* and HVD_*
# variables come from horovodrun's (E2E_OTHER_VAR stays behind), and they run in the agent's
# working directory.
agent_dir=$(mktemp -d)
trap 'rm -rf "$agent_dir"' EXIT
cat >"$agent_dir/agent" <<'AGENT'
#!/bin/sh
# agent HOST COMMAND: run COMMAND here, in this directory, with the "host's" environment
echo "$1" >>"$(dirname "$0")/hosts"
cd "$(dirname "$0")" && HVD_E2E_HOST_VAR="on-$1" exec env -u E2E_OTHER_VAR /bin/sh -c "$2"
AGENT
chmod +x "$agent_dir/agent"
E2E_OTHER_VAR=launcher HOROVOD_E2E_JOB=job HVD_E2E_JOB=job2 run_hvd -np 3 \
  -H host-0a1b:2,host-2c3d:1 --internal-rsh-agent "$agent_dir/agent" \
  sh -c 'echo "$HOROVOD_HOSTNAME/$HOROVOD_LOCAL_RANK ${HVD_E2E_HOST_VAR:-none} ${E2E_OTHER_VAR:-none} $HOROVOD_E2E_JOB $HVD_E2E_JOB $(pwd)"'
expect_eq "agent exit code" 0 "$RC"
expect_contains "agent rank 0" "$OUT" "[0]<stdout>:host-0a1b/0 on-host-0a1b none job job2 $agent_dir"
expect_contains "agent rank 1" "$OUT" "[1]<stdout>:host-0a1b/1 on-host-0a1b none job job2 $agent_dir"
expect_contains "agent rank 2" "$OUT" "[2]<stdout>:host-2c3d/0 on-host-2c3d none job job2 $agent_dir"
# each host reached once: its NIC discovery task service's session goes on to start its ranks
expect_eq "agent calls" "host-0a1b host-2c3d" \
  "$(sort "$agent_dir/hosts" | tr '\n' ' ' | sed 's/ $//')"
pass
